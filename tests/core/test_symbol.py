"""The symbol API of the original NNVM: composition, auto-variables, names, attrs, scopes."""

import copy

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.attribute import AttrScope
from nnvm.errors import AttrError, GraphError, NNVMError
from nnvm.name import NameManager, Prefix


def test_missing_inputs_become_named_variables():
    x = sym.Variable("x")
    y = sym.elemwise_add(x, name="add1")
    assert y.list_input_names() == ["x", "add1_rhs"]


def test_compose_by_keyword_and_position():
    a, b = sym.Variable("a"), sym.Variable("b")
    y = sym.elemwise_mul(lhs=a, rhs=b, name="m")
    assert y.list_input_names() == ["a", "b"]
    z = sym.elemwise_sub(b, rhs=a)
    assert z.list_input_names() == ["b", "a"]


def test_unknown_keyword_lists_valid_inputs():
    with pytest.raises(GraphError, match="Inputs of elemwise_add: lhs, rhs"):
        sym.elemwise_add(sym.Variable("a"), data=sym.Variable("b"))


def test_unknown_attribute_lists_valid_ones():
    with pytest.raises(AttrError, match="unknown attribute 'scaler'.*scalar"):
        sym.__add_scalar__(sym.Variable("a"), scaler=1.0)


def test_bad_attribute_value_says_expected_kind():
    with pytest.raises(AttrError, match="must be a number"):
        sym.__add_scalar__(sym.Variable("a"), scalar="abc")


def test_functional_composition_substitutes_free_variables():
    net = sym.relu(sym.Variable("data"), name="r")
    x = sym.Variable("x")
    composed = net(data=sym.exp(x, name="e"))
    assert composed.list_input_names() == ["x"]
    positional = net(x)
    assert positional.list_input_names() == ["x"]
    assert net.list_input_names() == ["data"]  # the original is unchanged
    with pytest.raises(GraphError, match="free variable"):
        net(nope=x)


def test_group_outputs_internals_children():
    x = sym.Variable("x")
    a = sym.exp(x, name="a")
    b = sym.log(a, name="b")
    g = sym.Group([a, b])
    assert g.list_output_names() == ["a_output", "b_output"]
    internals = b.get_internals()
    assert internals.list_output_names() == ["x", "a_output", "b_output"]
    assert internals["a_output"].list_output_names() == ["a_output"]
    assert b.get_children().list_output_names() == ["a_output"]
    assert x.get_children() is None
    assert len(g) == 2 and [s.name for s in g] == ["a", "b"]


def test_attr_and_list_attr_use_nnvm_strings():
    y = sym.__mul_scalar__(sym.Variable("x"), scalar=2, name="s")
    assert y.attr("scalar") == "2.0"
    assert y.list_attr() == {"scalar": "2.0"}
    assert y.list_attr(recursive=True) == {"s$scalar": "2.0"}


def test_attr_scope_and_name_prefix():
    with AttrScope(ctx_group="dev1"):
        with Prefix("block1_"):
            y = sym.exp(sym.Variable("x"))
    assert y.attr("ctx_group") == "dev1"
    assert y.name.startswith("block1_exp")
    with NameManager():
        a = sym.exp(sym.Variable("x"))
        b = sym.exp(sym.Variable("x"))
    assert (a.name, b.name) == ("exp0", "exp1")
    with pytest.raises(AttrError):
        AttrScope(ctx_group=1)


def test_operator_overloading_matches_numpy(rng):
    x, y = sym.Variable("x"), sym.Variable("y")
    out = sym.Group([x + y, x - 2.0, 3.0 - x, x * y, x / 4.0, 2.0 / x, -x, x ** 2.0,
                     2.0 ** x, x / y, x ** y])
    a = rng.uniform(0.5, 2, (3, 4)).astype("float32")
    b = rng.uniform(0.5, 2, (1, 4)).astype("float32")
    lib = nnvm.compiler.build(out, "reference", shape={"x": a.shape, "y": b.shape})
    got = lib.run(x=a, y=b)
    want = [a + b, a - 2, 3 - a, a * b, a / 4, 2 / a, -a, a ** 2, 2 ** a, a / b, a ** b]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5)
        assert g.dtype == np.float32


def test_deepcopy_is_independent():
    y = sym.exp(sym.Variable("x"), name="e")
    z = copy.deepcopy(y)
    z._set_attr(__hint__="1")
    assert y.attr("__hint__") is None and z.attr("__hint__") == "1"


def test_generated_function_has_docstring():
    doc = sym.__add_scalar__.__doc__
    assert "scalar" in doc and "Args:" in doc
    assert "broadcast_add" in dir(sym)
    with pytest.raises(AttributeError, match="not registered"):
        sym.no_such_op  # noqa: B018


def test_variable_hints_seed_inference():
    x = sym.Variable("x", shape=(2, 5), dtype="float64")
    y = sym.exp(x)
    ishape, oshape = nnvm.compiler.graph_util.infer_shape(nnvm.graph.create(y))
    itype, otype = nnvm.compiler.graph_util.infer_dtype(nnvm.graph.create(y))
    assert (ishape, oshape, itype, otype) == ([(2, 5)], [(2, 5)], ["float64"], ["float64"])


def test_multi_output_symbol_rejected_as_input():
    g = sym.Group([sym.Variable("a"), sym.Variable("b")])
    with pytest.raises(NNVMError, match="outputs"):
        sym.exp(g)
