"""CorrectLayout and the ``__layout_transform__`` op."""

import numpy as np
import pytest

from _numerics import assert_same_numerics, op_names, setup
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal
from nnvm.errors import ShapeError
from nnvm.interpreter import run_graph
from nnvm.ir import Graph
from nnvm.ops.layout import transform_shape

T = "__layout_transform__"


@pytest.mark.parametrize("src,dst,ref", [
    ("NCHW", "NHWC", lambda x: x.transpose(0, 2, 3, 1)),
    ("NHWC", "NCHW", lambda x: x.transpose(0, 3, 1, 2)),
    ("NCHW", "NCHW4c", lambda x: x.reshape(2, 2, 4, 3, 5).transpose(0, 1, 3, 4, 2)),
])
def test_layout_transform_op_matches_numpy(src, dst, ref, rng):
    x = rng.standard_normal((2, 8, 3, 5)).astype("float32")
    y = sym.layout_transform(sym.Variable("x"), src_layout=src, dst_layout=dst)
    (out,) = run_graph(Graph(y.outputs), {"x": x})
    np.testing.assert_array_equal(out, ref(x))
    back = sym.layout_transform(y, src_layout=dst, dst_layout=src)
    np.testing.assert_array_equal(run_graph(Graph(back.outputs), {"x": x})[0], x)


def test_bad_layouts_are_shape_errors():
    with pytest.raises(ShapeError, match="does not split"):
        transform_shape((1, 6, 2, 2), "NCHW", "NCHW4c")
    with pytest.raises(ShapeError, match="primal axes differ"):
        transform_shape((1, 6, 2, 2), "NCHW", "NCDW")


def test_inverse_transforms_cancel_and_sink_below_elementwise():
    x = sym.Variable("x")
    a = sym.layout_transform(x, src_layout="NCHW", dst_layout="NHWC")
    b = sym.relu(sym.layout_transform(a, src_layout="NHWC", dst_layout="NCHW"))
    c = sym.layout_transform(b, src_layout="NCHW", dst_layout="NHWC")
    g, _, feed = setup(sym.exp(c), {"x": (1, 2, 3, 4)})
    after = g.apply("CorrectLayout")
    expected = sym.layout_transform(sym.exp(sym.relu(sym.Variable("x"))),
                                    src_layout="NCHW", dst_layout="NHWC")
    check_graph_equal(after, Graph(expected.outputs))
    assert_same_numerics(g, after, feed)


def test_input_layout_mismatch_inserts_a_transform():
    x = sym.Variable("x")
    y = sym.max_pool2d(sym.relu(x), pool_size=(2, 2), layout="NCHW")
    g, _, _ = setup(y, {"x": (1, 4, 4, 2)})
    after = g.with_attrs(layout_inputs={"x": "NHWC"}).apply("CorrectLayout")
    assert op_names(after).count(T) == 1
    idx = after.index
    assert after.attrs["layout"][idx.output_entries[0]] == "NCHW"
    tnode = next(n for n in idx.nodes if n.op is not None and n.op.name == T)
    assert (tnode.attrs["src_layout"], tnode.attrs["dst_layout"]) == ("NHWC", "NCHW")
