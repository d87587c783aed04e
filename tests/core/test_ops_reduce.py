"""Reductions (sum, mean, max, min, prod, argmax, argmin) and expand_like."""

import numpy as np
import pytest

from nnvm import sym
from nnvm.ir import Graph
from nnvm.testing import OpCase, check_case_forward, check_case_gradient, check_shape_error

_AXES = [({}, None, False), (dict(axis=(1,)), 1, False), (dict(axis=(0, 2), keepdims=True),
                                                          (0, 2), True),
         (dict(axis=(1,), exclude=True), (0, 2), False), (dict(axis=(-1,)), -1, False)]


def _np_reduce(fn, axis, keep):
    return lambda x: fn(x, axis=axis, keepdims=keep)


CASES = [OpCase(name, [(2, 3, 4)], attrs, _np_reduce(fn, axis, keep), id=f"{name}_{i}",
                positive=name == "prod")
         for name, fn in (("sum", np.sum), ("mean", np.mean), ("max", np.max),
                          ("min", np.min), ("prod", np.prod))
         for i, (attrs, axis, keep) in enumerate(_AXES)]
CASES += [
    OpCase("argmax", [(2, 3, 4)], dict(axis=(1,)), lambda x: np.argmax(x, axis=1),
           out_dtypes=["int64"]),
    OpCase("argmax", [(2, 3, 4)], dict(keepdims=True),
           lambda x: np.argmax(x).reshape(1, 1, 1), out_dtypes=["int64"], id="argmax_all"),
    OpCase("argmin", [(2, 3, 4)], dict(axis=(-1,), keepdims=True, dtype="int32"),
           lambda x: np.argmin(x, axis=-1)[..., None], out_dtypes=["int32"]),
    OpCase("expand_like", [(3,), np.zeros((2, 3, 4))], dict(axis=(1,), exclude=True),
           lambda x, like: np.broadcast_to(x[None, :, None], like.shape), wrt=["data"]),
    OpCase("expand_like", [(2, 1, 4), np.zeros((2, 3, 4))], dict(axis=(1,)),
           lambda x, like: np.broadcast_to(x, like.shape), wrt=["data"],
           id="expand_like_keepdims"),
    OpCase("expand_like", [(), np.zeros((2, 3))], {},
           lambda x, like: np.full(like.shape, x), wrt=["data"], id="expand_like_all"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_matches_numpy(case):
    check_case_forward(case)


@pytest.mark.parametrize("case", [c for c in CASES if c.grad], ids=lambda c: c.id)
def test_gradient_matches_finite_differences(case):
    check_case_gradient(case)


ERROR_CASES = [
    ("sum", [(2, 3)], dict(axis=(2,)), "out of range"),
    ("mean", [(2, 3)], dict(axis=(0, -2)), "repeats"),
    ("max", [(2, 3)], dict(axis=(-3,)), "out of range"),
    ("min", [(2, 3)], dict(axis=(5,)), "out of range"),
    ("prod", [(2, 3)], dict(axis=(3,), exclude=True), "out of range"),
    ("argmax", [(2, 3, 4)], dict(axis=(0, 1)), "one axis"),
    ("argmin", [(2, 3)], dict(axis=(2,)), "out of range"),
    ("expand_like", [(2, 3), (2, 3, 4)], dict(axis=(0,)), "not a reduction"),
]


@pytest.mark.parametrize("op_name,shapes,attrs,match", ERROR_CASES,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_shape_error_names_node(op_name, shapes, attrs, match):
    check_shape_error(op_name, shapes, attrs, match)


def test_reduce_dtypes():
    x = sym.Variable("x")
    g = Graph(sym.Group([sym.sum(x, axis=(0,)), sym.argmax(x, axis=(0,)),
                         sym.argmin(x, dtype="int32")]).outputs)
    g = g.apply("InferType", dtype_inputs={"x": "float64"})
    assert [g.attrs["dtype"][e] for e in g.index.output_entries] == ["float64", "int64",
                                                                      "int32"]


def test_integer_sum_keeps_dtype():
    from nnvm.testing import check_function

    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    (out,) = check_function("sum", [x], dict(axis=(1,)), reference=lambda a: a.sum(axis=1))
    assert out.dtype == np.int32
