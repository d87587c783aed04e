"""Transform ops: reshape family, concatenate/split, transpose, slicing, pad, take, cast, clip,
creation ops."""

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import AttrError, TypeInferenceError
from nnvm.ir import Graph
from nnvm.ops.transform import reshape_target
from nnvm.testing import (OpCase, check_case_forward, check_case_gradient, check_function,
                          check_shape_error)

_IDX = np.array([[0, 2], [1, 1]])

CASES = [
    OpCase("flatten", [(2, 3, 4)], {}, lambda x: x.reshape(2, 12)),
    OpCase("reshape", [(2, 3, 4)], dict(shape=(4, -1)), lambda x: x.reshape(4, 6)),
    OpCase("reshape", [(2, 3, 4)], dict(shape=(0, -3)), lambda x: x.reshape(2, 12),
           id="reshape_codes"),
    OpCase("reshape_like", [(2, 3, 4), np.zeros((6, 4))], {}, lambda x, like: x.reshape(6, 4),
           wrt=["data"]),
    OpCase("concatenate", [(2, 3), (2, 1), (2, 2)], {}, lambda *xs: np.concatenate(xs, 1)),
    OpCase("concatenate", [(1, 3), (2, 3)], dict(axis=0), lambda *xs: np.concatenate(xs, 0),
           id="concatenate_ax0"),
    OpCase("_split_like", [(2, 5), np.zeros((2, 2)), np.zeros((2, 3))],
           dict(axis=1, num_outputs=2), lambda x, a, b: (x[:, :2], x[:, 2:]), wrt=["data"]),
    OpCase("split", [(2, 6)], dict(indices_or_sections=3),
           lambda x: tuple(np.split(x, 3, axis=1))),
    OpCase("split", [(5, 2)], dict(indices_or_sections=(1, 4), axis=0),
           lambda x: (x[:1], x[1:4], x[4:]), id="split_indices"),
    OpCase("transpose", [(2, 3, 4)], dict(axes=(1, 2, 0)), lambda x: x.transpose(1, 2, 0)),
    OpCase("transpose", [(2, 3, 4)], {}, lambda x: x.T, id="transpose_reverse"),
    OpCase("expand_dims", [(2, 3)], dict(axis=1, num_newaxis=2),
           lambda x: x[:, None, None, :]),
    OpCase("expand_dims", [(2, 3)], dict(axis=-1), lambda x: x[..., None],
           id="expand_dims_neg"),
    OpCase("squeeze", [(2, 1, 3, 1)], {}, lambda x: x.reshape(2, 3)),
    OpCase("squeeze", [(2, 1, 3, 1)], dict(axis=(-1,)), lambda x: x[..., 0], id="squeeze_ax"),
    OpCase("broadcast_to", [(3, 1)], dict(shape=(2, 3, 4)),
           lambda x: np.broadcast_to(x, (2, 3, 4))),
    OpCase("strided_slice", [(4, 5, 3)], dict(begin=(1, 4), end=(4, 0), stride=(2, -2)),
           lambda x: x[1:4:2, 4:0:-2]),
    OpCase("strided_slice", [(4, 5)], dict(begin=(-3, 1), end=(100, -1)),
           lambda x: x[-3:100, 1:-1], id="strided_slice_clamp"),
    OpCase("_strided_slice_backward", [(2, 2, 3), np.zeros((4, 5, 3))],
           dict(begin=(1, 4), end=(4, 0), stride=(2, -2)), None, wrt=["out_grad"]),
    OpCase("pad", [(2, 3)], dict(pad_width=((1, 0), (2, 3)), pad_value=1.5),
           lambda x: np.pad(x, ((1, 0), (2, 3)), constant_values=1.5)),
    OpCase("take", [(3, 4), _IDX], dict(axis=1), lambda x, i: x[:, i]),
    OpCase("take", [(3, 4), np.array([11, 0, 5, 5])], {}, lambda x, i: x.reshape(-1)[i],
           id="take_flat"),
    OpCase("take", [(3, 4), np.array([-1, 7])], dict(axis=0),
           lambda x, i: x[np.clip(i, 0, 2)], id="take_clip"),
    OpCase("_take_backward", [(3, 2, 2), _IDX, np.zeros((3, 4))], dict(axis=1), None,
           wrt=["out_grad"]),
    OpCase("cast", [(2, 3)], dict(dtype="float64"), lambda x: x, out_dtypes=["float64"]),
    OpCase("cast", [np.array([1.7, -2.2, 3.5])], dict(dtype="int32"),
           lambda x: x.astype(np.int32), out_dtypes=["int32"], grad=False, id="cast_int"),
    OpCase("cast_like", [(2, 3), np.zeros(1, np.float64)], {}, lambda x, like: x,
           out_dtypes=["float64"], wrt=["data"], keep_dtype=(1,)),
    OpCase("clip", [(3, 4)], dict(a_min=-0.5, a_max=0.7), lambda x: np.clip(x, -0.5, 0.7)),
    OpCase("full", [], dict(shape=(2, 3), fill_value=2.5), lambda: np.full((2, 3), 2.5),
           out_dtypes=["float32"], grad=False),
    OpCase("zeros", [], dict(shape=(2, 1), dtype="int64"), lambda: np.zeros((2, 1)),
           out_dtypes=["int64"], grad=False),
    OpCase("ones", [], dict(shape=(3,), dtype="float64"), lambda: np.ones(3),
           out_dtypes=["float64"], grad=False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_matches_numpy(case):
    check_case_forward(case)


@pytest.mark.parametrize("case", [c for c in CASES if c.grad], ids=lambda c: c.id)
def test_gradient_matches_finite_differences(case):
    check_case_gradient(case)


@pytest.mark.parametrize("src,spec,want", [
    ((2, 3, 4), (0, -1), (2, 12)), ((2, 3, 4), (-2,), (2, 3, 4)),
    ((2, 3, 4), (-3, 0), (6, 4)), ((2, 3, 4), (-4, 1, 2, -2), (1, 2, 3, 4)),
    ((6, 4), (-4, -1, 3, 0), (2, 3, 4)), ((2, 3, 4), (4, 0, -1), (4, 3, 2)),
    ((2, 3, 4), (0, 0, -2), (2, 3, 4)), ((24,), (2, -1, 3), (2, 4, 3))])
def test_reshape_special_codes(src, spec, want):
    assert reshape_target(src, spec) == want
    assert np.zeros(src).reshape(want).size == np.prod(src)


def _infer(symbol, **shape):
    g = Graph(symbol.outputs).apply("InferShape", shape_inputs=shape)
    idx = g.index
    return {idx.nodes[n].name: g.attrs["shape"][idx.entry_rptr[n]] for n in idx.input_nodes}, \
        [g.attrs["shape"][e] for e in idx.output_entries]


def test_concatenate_infers_a_missing_input_from_the_output():
    a, b = sym.Variable("a"), sym.Variable("b")
    g = Graph(sym.concatenate(a, b, axis=1, name="cat").outputs)
    idx = g.index
    seeded = [None] * idx.num_node_entries
    seeded[idx.output_entries[0]] = (2, 7)
    g = g.with_attrs(shape=seeded).apply("InferShape", shape_inputs={"a": (2, 3)})
    assert g.attrs["shape"][idx.entry_rptr[idx.input_nodes[1]]] == (2, 4)


def test_transpose_infers_input_from_output():
    x = sym.Variable("x")
    g = Graph(sym.transpose(x, axes=(2, 0, 1)).outputs)
    idx = g.index
    seeded = [None] * idx.num_node_entries
    seeded[idx.output_entries[0]] = (4, 2, 3)
    g = g.with_attrs(shape=seeded).apply("InferShape")
    assert g.attrs["shape"][0] == (2, 3, 4)


def test_split_outputs_and_int_vs_tuple():
    parts = sym.split(sym.Variable("x"), indices_or_sections=2, axis=0)
    assert len(parts.outputs) == 2
    parts = sym.split(sym.Variable("x"), indices_or_sections=(2,), axis=0)
    assert len(parts.outputs) == 2
    _, outs = _infer(parts, x=(5, 1))
    assert outs == [(2, 1), (3, 1)]
    with pytest.raises(AttrError, match="sections"):
        sym.split(sym.Variable("x"), indices_or_sections=0)


ERROR_CASES = [
    ("flatten", [()], {}, "scalar"),
    ("reshape", [(2, 3)], dict(shape=(4, -1)), "cannot reshape"),
    ("reshape", [(2, 3)], dict(shape=(-1, -1)), "more than one"),
    ("reshape", [(2, 3)], dict(shape=(0, 0, 0)), "only 2"),
    ("reshape_like", [(2, 3), (4, 2)], {}, "elements"),
    ("concatenate", [(2, 3), (3, 3)], {}, "except on axis"),
    ("_split_like", [(2, 5), (2, 2), (3, 3)], dict(num_outputs=2), "except on axis"),
    ("split", [(2, 5)], dict(indices_or_sections=2), "equal sections"),
    ("transpose", [(2, 3)], dict(axes=(0, 0)), "permutation"),
    ("expand_dims", [(2, 3)], dict(axis=4), "out of range"),
    ("squeeze", [(2, 3)], dict(axis=(0,)), "cannot squeeze"),
    ("broadcast_to", [(2, 3)], dict(shape=(4, 3)), "do not broadcast"),
    ("strided_slice", [(2, 3)], dict(begin=(0, 0, 0), end=(1, 1, 1)), "rank"),
    ("_strided_slice_backward", [(1, 1), (2, 3)], dict(begin=(0, 0), end=(1, 2)), "out_grad"),
    ("pad", [(2, 3)], dict(pad_width=((1, 1),)), "pairs"),
    ("take", [(2, 3), (4,)], dict(axis=2), "out of range"),
    ("_take_backward", [(2, 3), (3,), (2, 3)], dict(axis=5), "out of range"),
    ("cast", [(2, 3), ], dict(dtype="float16"), None),
    ("cast_like", [(2, 3), (1,)], {}, None),
    ("clip", [(2, 3)], dict(a_min=0.0, a_max=1.0), None),
    ("full", [], dict(shape=(2,), fill_value=1.0), None),
    ("zeros", [], dict(shape=(2,)), None),
    ("ones", [], dict(shape=(2,)), None),
]


@pytest.mark.parametrize("op_name,shapes,attrs,match", [c for c in ERROR_CASES if c[3]],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_shape_error_names_node(op_name, shapes, attrs, match):
    check_shape_error(op_name, shapes, attrs, match)


def test_take_requires_integer_indices():
    with pytest.raises(TypeInferenceError, match="tk"):
        Graph(sym.take(sym.Variable("x"), sym.Variable("i"), name="tk").outputs).apply(
            "InferType", dtype_inputs={"x": "float32", "i": "float32"})


def test_creation_ops_in_a_built_graph():
    x = sym.Variable("x")
    y = x + sym.full(shape=(2, 3), fill_value=2.0) * sym.ones(shape=(2, 3)) + sym.zeros(
        shape=(2, 3))
    lib = nnvm.compiler.build(y, target="reference", shape={"x": (2, 3)})
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = lib.run(x=a)
    np.testing.assert_allclose(out, a + 2.0)


def test_cast_changes_dtype_in_build():
    lib = nnvm.compiler.build(sym.cast(sym.Variable("x"), dtype="int32"), target="reference",
                              shape={"x": (3,)})
    (out,) = lib.run(x=np.array([1.5, -2.5, 3.9], dtype=np.float32))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [1, -2, 3])


def test_check_function_rejects_a_wrong_reference():
    with pytest.raises(AssertionError):
        check_function("transpose", [np.arange(6.0).reshape(2, 3)], {},
                       reference=lambda x: x.reshape(3, 2))
