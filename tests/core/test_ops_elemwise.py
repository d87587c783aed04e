"""Elementwise, broadcast, scalar and comparison ops of nnvm/ops/elemwise.py."""

import numpy as np
import pytest

from nnvm import sym
from nnvm.errors import TypeInferenceError
from nnvm.ir import Graph
from nnvm.testing import OpCase, check_case_forward, check_case_gradient, check_shape_error

_S = (3, 4)
_MASK = np.array([[True, False, True, False]] * 3)
# inputs away from kinks: |x| >= 0.2 so relu/abs/sign are smooth under eps = 1e-6
_AWAY = np.where(np.abs(np.random.default_rng(5).standard_normal(_S)) < 0.2, 0.7,
                 np.random.default_rng(5).standard_normal(_S))

UNARY = {"relu": lambda x: np.maximum(x, 0), "tanh": np.tanh,
         "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "exp": np.exp, "log": np.log,
         "sqrt": np.sqrt, "negative": lambda x: -x, "abs": np.abs, "sign": np.sign,
         "copy": lambda x: x, "block_grad": lambda x: x,
         "zeros_like": np.zeros_like, "ones_like": np.ones_like}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
SCALAR = {"__add_scalar__": lambda x: x + 1.5, "__sub_scalar__": lambda x: x - 1.5,
          "__rsub_scalar__": lambda x: 1.5 - x, "__mul_scalar__": lambda x: x * 1.5,
          "__div_scalar__": lambda x: x / 1.5, "__rdiv_scalar__": lambda x: 1.5 / x,
          "__pow_scalar__": lambda x: x ** 1.5, "__rpow_scalar__": lambda x: 1.5 ** x}
CMP = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
       "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal}

CASES = [OpCase(n, [_AWAY if n in ("relu", "abs", "sign") else _S], {}, f,
                positive=n in ("log", "sqrt"), grad=n != "block_grad")
         for n, f in UNARY.items()]
CASES += [OpCase(f"elemwise_{n}", [_S, _S], {}, f, positive=n == "div")
          for n, f in BINARY.items()]
CASES += [OpCase(f"broadcast_{n}", [(2, 1, 4), (3, 1)], {}, f, positive=n == "div")
          for n, f in BINARY.items()]
CASES += [
    OpCase("broadcast_pow", [(2, 3), (3,)], {}, np.power, positive=True),
    OpCase("broadcast_maximum", [(3, 4), (4,)], {}, np.maximum),
    OpCase("broadcast_minimum", [(3, 1), (1, 4)], {}, np.minimum),
    OpCase("where", [_MASK, (3, 4), (1, 4)], {}, np.where, wrt=["x", "y"],
           out_dtypes=["float32"]),
    OpCase("collapse_sum_like", [(2, 3, 4), np.zeros((3, 1))], {},
           lambda g, like: g.sum(axis=(0, 2)).reshape(3, 1), wrt=["data"]),
    OpCase("elemwise_sum", [_S, _S, _S], {}, lambda a, b, c: a + b + c),
    OpCase("_relu_backward", [_S, np.abs(_AWAY)], {},
           lambda og, y: np.where(y > 0, og, 0), grad=False),
]
CASES += [OpCase(n, [_S], dict(scalar=1.5), f, positive=n in ("__pow_scalar__",
                                                              "__rdiv_scalar__"))
          for n, f in SCALAR.items()]
CASES += [OpCase(f"broadcast_{n}", [np.array([[1.0, 2.0, 3.0]]), np.array([[2.0], [1.0]])],
                 {}, f, out_dtypes=["bool"]) for n, f in CMP.items()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_matches_numpy(case):
    check_case_forward(case)


@pytest.mark.parametrize("case", [c for c in CASES if c.grad], ids=lambda c: c.id)
def test_gradient_matches_finite_differences(case):
    check_case_gradient(case)


def test_block_grad_stops_gradients():
    from nnvm.testing import check_gradient

    with pytest.raises(AssertionError, match="no gradient"):
        check_gradient("block_grad", [np.ones(3)])


_NO_SHAPE_ERROR = "one input: every shape is valid"
ERROR_CASES = [(f"elemwise_{n}", [(2, 3), (3, 2)], {}, "same shape") for n in BINARY]
ERROR_CASES += [(f"broadcast_{n}", [(2, 3), (4, 3)], {}, "do not broadcast")
                for n in list(BINARY) + ["pow", "maximum", "minimum"] + list(CMP)]
ERROR_CASES += [("where", [(2, 3), (2, 3), (5, 3)], {}, "do not broadcast"),
                ("elemwise_sum", [(2, 3), (2, 4)], {}, "same shape"),
                ("_relu_backward", [(2, 3), (3, 2)], {}, "same shape")]


@pytest.mark.parametrize("op_name,shapes,attrs,match", ERROR_CASES,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_shape_error_names_node(op_name, shapes, attrs, match):
    check_shape_error(op_name, shapes, attrs, match)


def test_elemwise_infers_shapes_both_ways():
    a, b = sym.Variable("a"), sym.Variable("b")
    g = Graph(sym.elemwise_add(a, sym.relu(b)).outputs).apply("InferShape",
                                                              shape_inputs={"a": (2, 5)})
    assert g.attrs["shape"][g.index.entry_rptr[g.index.input_nodes[1]]] == (2, 5)


def test_comparison_dtype_is_bool_and_operands_must_agree():
    a, b = sym.Variable("a"), sym.Variable("b")
    g = Graph(sym.broadcast_less(a, b).outputs).apply("InferType",
                                                      dtype_inputs={"a": "float64"})
    assert g.attrs["dtype"][g.index.output_entries[0]] == "bool"
    with pytest.raises(TypeInferenceError, match="add_node"):
        Graph(sym.elemwise_add(a, b, name="add_node").outputs).apply(
            "InferType", dtype_inputs={"a": "float32", "b": "int32"})
