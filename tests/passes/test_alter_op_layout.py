"""AlterOpLayout + CorrectLayout + PrecomputePrune: a backend hook switches conv2d to NHWC or
to the blocked NCHW4c variant; numerics stay the same and activation transforms cancel."""

import numpy as np
import pytest

import nnvm
from _numerics import assert_same_numerics, op_names, setup
from nnvm import op as op_registry
from nnvm import sym
from nnvm.ops.common import op
from nnvm_passes.alter_op_layout import layout_transform


def _to_nhwc(attrs, inputs, tinfos):
    if attrs["layout"] != "NCHW" or attrs["kernel_layout"] != "OIHW":
        return None
    x = layout_transform(inputs[0], "NCHW", "NHWC")
    w = layout_transform(inputs[1], "OIHW", "HWIO")
    y = op("conv2d", x, w, *inputs[2:], **{**attrs, "layout": "NHWC", "kernel_layout": "HWIO"})
    return layout_transform(y, "NHWC", "NCHW")


def _to_nchw4c(attrs, inputs, tinfos):
    (_, c, _, _), _ = tinfos[0]
    if attrs["layout"] != "NCHW" or attrs["groups"] != 1 or c % 4 or attrs["channels"] % 4:
        return None
    keep = {k: v for k, v in attrs.items() if k not in ("layout", "kernel_layout",
                                                        "out_layout")}
    x = layout_transform(inputs[0], "NCHW", "NCHW4c")
    w = layout_transform(inputs[1], "OIHW", "OIHW4i4o")
    y = op("_contrib_conv2d_NCHWc", x, w, *inputs[2:], layout="NCHW4c",
           kernel_layout="OIHW4i4o", out_layout="NCHW4c", **keep)
    return layout_transform(y, "NCHW4c", "NCHW")


@pytest.fixture(params=[_to_nhwc, _to_nchw4c], ids=["NHWC", "NCHW4c"])
def hook(request):
    """Install a test-only FAlterOpLayout on conv2d and remove it afterwards."""
    op_registry.get_op("conv2d")
    table = op_registry._ATTRS.setdefault("FAlterOpLayout", {})
    saved = table.get("conv2d")
    table["conv2d"] = (request.param, 100, "test")
    yield request.param
    if saved is None:
        table.pop("conv2d", None)
    else:
        table["conv2d"] = saved


def _net():
    x = sym.Variable("x")
    y = sym.relu(sym.conv2d(x, channels=8, kernel_size=(3, 3), padding=(1, 1), name="c1"))
    y = sym.conv2d(y + sym.Variable("b", shape=(8, 1, 1)), channels=8, kernel_size=(1, 1),
                   name="c2")
    return sym.relu(y)


def test_hook_rewrites_and_numerics_are_unchanged(hook):
    g, _, feed = setup(_net(), {"x": (2, 4, 5, 5)})
    laid_out = g.apply(["AlterOpLayout", "CorrectLayout"])
    after = laid_out.apply(["PrecomputePrune", "InferShape", "InferType"])
    names = op_names(after)
    assert ("_contrib_conv2d_NCHWc" if hook is _to_nchw4c else "conv2d") in names
    # weights are transformed at build time; between c1 and c2 the transforms cancelled
    assert names.count("__layout_transform__") == 2
    assert_same_numerics(g, after, feed, rtol=1e-4)
    lay = laid_out.attrs["layout"]
    idx = laid_out.index
    c2 = [i for i, n in enumerate(idx.nodes) if n.op is not None and "conv2d" in n.op.name][-1]
    assert lay[idx.entry_id(c2, 0)] == ("NHWC" if hook is _to_nhwc else "NCHW4c")


def test_build_at_level_3_uses_the_hook(hook):
    g, params, feed = setup(_net(), {"x": (1, 4, 4, 4)})
    lib3 = nnvm.compiler.build(_net(), target="reference", shape={"x": (1, 4, 4, 4)},
                               params=params, opt_level=3)
    lib2 = nnvm.compiler.build(_net(), target="reference", shape={"x": (1, 4, 4, 4)},
                               params=params, opt_level=2)
    assert "__layout_transform__" in op_names(lib3.graph)
    assert "__layout_transform__" not in op_names(lib2.graph)
    np.testing.assert_allclose(lib3.run(**feed)[0], lib2.run(**feed)[0], rtol=1e-4,
                               atol=1e-4)


def test_no_hook_no_change():
    g, _, _ = setup(_net(), {"x": (1, 4, 4, 4)})
    assert g.apply("AlterOpLayout") is g
