"""The op registry: open attributes, plevel override, aliases, clear lookup errors."""

import numpy as np
import pytest

import nnvm
from nnvm import op as registry
from nnvm import sym
from nnvm.errors import OpNotFoundError, PluginError


def test_lookup_error_suggests_names():
    with pytest.raises(OpNotFoundError, match="Did you mean: relu"):
        registry.get_op("reluu")


def test_alias_resolves_to_op():
    assert registry.get_op("__add_symbol__") is registry.get_op("broadcast_add")
    assert registry.get_op("add").name == "broadcast_add"


def test_open_attribute_with_plevel_override():
    op = registry.get_op("exp")
    op.set_attr("FTestOnly", 1, plevel=5, provider="t1")
    with pytest.raises(PluginError, match="already set at plevel 5"):
        op.set_attr("FTestOnly", 2, plevel=5, provider="t2")
    op.set_attr("FTestOnly", 3, plevel=4, provider="t2")  # lower: ignored
    assert op.get_attr("FTestOnly") == 1
    op.set_attr("FTestOnly", 4, plevel=6, provider="t3")
    assert op.get_attr("FTestOnly") == 4
    assert registry.attr_provider("exp", "FTestOnly") == "t3"
    assert registry.get_attr_map("FTestOnly")["exp"] == 4


def test_override_reference_kernel_is_used():
    op = registry.get_op("sign")
    old = op.get_attr("FReference")
    op.set_attr("FReference", lambda attrs, x: np.sign(x) * 2, plevel=99, provider="t")
    try:
        lib = nnvm.compiler.build(sym.sign(sym.Variable("x")), "reference", shape={"x": (2,)})
        np.testing.assert_array_equal(lib.run(x=np.array([-3, 3], "float32"))[0], [-2, 2])
    finally:
        registry._ATTRS["FReference"]["sign"] = (old, 10, "nnvm")


def test_duplicate_registration_is_refused():
    with pytest.raises(PluginError, match="taken"):
        registry.register_op("exp", doc="dup")


def test_every_op_has_record_and_rules():
    for name in registry.list_op_names():
        op = registry.get_op(name)
        assert op.doc, name
        assert op.has_attr("FListInputNames") and op.has_attr("FListOutputNames"), name
        assert op.get_attr("FReference") is not None or op.get_attr("FReferenceNode") \
            is not None, f"{name} has no reference kernel"
        assert op.get_attr("TOpPattern") is not None, f"{name} has no fusion pattern"
