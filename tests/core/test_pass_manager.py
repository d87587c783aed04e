"""Pass registry and manager: contracts checked before and while passes run, pipelines, IR
dumps. Core only: the passes used here are core's analyses and passes registered by the tests."""

import pytest

import nnvm
from nnvm import pass_manager as pm
from nnvm import graph_attrs, sym
from nnvm.errors import PassDependencyError, PassError
from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph, NodeEntry, make_node


def _graph():
    return nnvm.graph.create(sym.exp(sym.Variable("x"), name="e"))


def test_missing_attribute_names_the_providing_pass():
    @pm.register_pass("_TestNeedsShape", requires=("shape",), override=True)
    def needs_shape(g):
        return g

    with pytest.raises(PassDependencyError, match="provided by pass 'InferShape'"):
        _graph().apply("_TestNeedsShape")
    g = _graph().apply(["InferShape", "_TestNeedsShape"], shape_inputs={"x": (3,)})
    assert g.attrs["shape"] == [(3,), (3,)]


def test_unknown_pass_suggests_close_names():
    with pytest.raises(PassError, match="Did you mean: InferShape"):
        _graph().apply("InferShap")


def test_pass_error_names_pass_and_history():
    @pm.register_pass("_TestFails", override=True)
    def fails(g):
        raise nnvm.NNVMError("boom")

    with pytest.raises(nnvm.NNVMError, match=r"boom \[in pass '_TestFails', after InferShape\]"):
        _graph().apply(["InferShape", "_TestFails"], shape_inputs={"x": (1,)})


def test_pass_must_return_graph():
    @pm.register_pass("_TestBad", override=True)
    def bad(g):
        return None

    with pytest.raises(PassError, match="returned NoneType"):
        _graph().apply("_TestBad")


def test_dump_ir_after_each_pass(tmp_path):
    pm.apply_passes(_graph().with_attrs(shape_inputs={"x": (2,)}), ["InferShape", "InferType"],
                    dump_ir=str(tmp_path))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["00_InferShape.txt", "01_InferType.txt"]
    assert "exp(%x)" in (tmp_path / files[0]).read_text()


def test_default_pipeline_filters_by_opt_level_and_switches():
    assert "InferShape" in pm.opt_level_passes(0)
    assert "InferShape" not in pm.opt_level_passes(0, disabled=["InferShape"])
    with pytest.raises(PassError):
        pm.opt_level_passes(0, enabled=["NoSuchPass"])


def test_print_graph_ir_joins_attrs():
    g = _graph().apply(["InferShape", "InferType", "PrintGraphIR"], shape_inputs={"x": (2, 2)}, dtype_inputs={"x": "float32"},
                       join_entry_attrs=["shape", "dtype"])
    assert "shape=(2, 2), dtype=float32" in g.attrs["graphir"]


def _negate(g):
    """A real rewrite: every output x becomes -x (new nodes, so new entry ids)."""
    return Graph([NodeEntry(make_node("negative", [e]), 0) for e in g.outputs], g.attrs)


def test_rewrite_drops_derived_attributes_and_the_analysis_is_re_run():
    pm.register_pass("_TestNegate", invalidates=DERIVED, override=True)(_negate)
    pm.register_pass("_TestNeedsShape", requires=("shape",), override=True)(lambda g: g)
    lines = []
    g = pm.apply_passes(_graph().with_attrs(shape_inputs={"x": (3,)}),
                        ["InferShape", "_TestNegate", "_TestNeedsShape"], log=lines.append)
    assert g.attrs["shape"] == [(3,)] * 3 and g.index.num_node_entries == 3
    assert [ln.split(":")[0] for ln in lines] == [
        "InferShape", "_TestNegate", "InferShape (re-run for _TestNeedsShape)", "_TestNeedsShape"]
    dropped = _graph().apply(["InferShape", "_TestNegate"], shape_inputs={"x": (3,)})
    assert "shape" not in dropped.attrs and "shape_num_unknown_nodes" not in dropped.attrs
    assert dropped.attrs["shape_inputs"] == {"x": (3,)}


def test_named_invalidation_drops_only_that_attribute_unless_the_pass_set_it():
    pm.register_pass("_TestStaleDtype", invalidates=("dtype",), override=True)(lambda g: g)
    g = _graph().apply(["InferShape", "InferType", "_TestStaleDtype"], shape_inputs={"x": (2,)})
    assert "shape" in g.attrs and "dtype" not in g.attrs

    @pm.register_pass("_TestResetDtype", invalidates=("dtype",), override=True)
    def reset(g):
        return g.with_attrs(dtype=["float16"] * g.index.num_node_entries)

    g = _graph().apply(["InferType", "_TestResetDtype"])
    assert g.attrs["dtype"] == ["float16", "float16"]


def test_check_before_running_follows_the_drops():
    graph_attrs.declare("_test_mark", graph_attrs.ENTRY, "test-only per-entry attribute")
    pm.register_pass("_TestMark", provides=("_test_mark",), override=True)(
        lambda g: g.with_attrs(_test_mark=[1] * g.index.num_node_entries))
    pm.register_pass("_TestNeedsMark", requires=("_test_mark",), override=True)(lambda g: g)
    pm.register_pass("_TestNegate", invalidates=DERIVED, override=True)(_negate)
    lines = []
    with pytest.raises(PassDependencyError, match=(
            r"requires graph attribute '_test_mark', which pass '_TestNegate' invalidated\. "
            r"It is provided by pass '_TestMark'; run that after '_TestNegate'")):
        pm.apply_passes(_graph(), ["_TestMark", "_TestNegate", "_TestNeedsMark"],
                        log=lines.append)
    assert lines == []
    g = _graph().apply(["_TestMark", "_TestNegate", "_TestMark", "_TestNeedsMark"])
    assert g.attrs["_test_mark"] == [1, 1, 1]


def test_stale_per_entry_attribute_from_an_undeclared_rewrite_is_reported():
    pm.register_pass("_TestSilentNegate", override=True)(_negate)  # declares nothing
    pm.register_pass("_TestNeedsShape", requires=("shape",), override=True)(lambda g: g)
    with pytest.raises(PassDependencyError, match="'shape', which is stale.*'InferShape'"):
        _graph().apply(["InferShape", "_TestSilentNegate", "_TestNeedsShape"],
                       shape_inputs={"x": (3,)})


def test_change_graph_true_is_accepted_as_invalidating_every_derived_attribute():
    pm.register_pass("_TestOldStyle", change_graph=True, override=True)(_negate)
    assert pm.get_pass("_TestOldStyle").invalidates == (DERIVED,)
    assert "shape" in pm.get_pass("_TestOldStyle").invalidated()
    g = _graph().apply(["InferShape", "InferType", "_TestOldStyle"], shape_inputs={"x": (3,)})
    assert not graph_attrs.derived() & set(g.attrs)


def test_enabled_pass_outside_the_pipeline_is_scheduled():
    pm.register_pass("_TestNegate", invalidates=DERIVED, override=True)(_negate)
    names = pm.opt_level_passes(0, enabled=["_TestNegate"])
    assert "_TestNegate" in names
    after = names[names.index("_TestNegate") + 1:]
    assert not any(pm.get_pass(n).invalidates for n in after)


def test_a_stale_attribute_a_rewrite_invalidates_is_re_computed():
    pm.register_pass("_TestNegate", invalidates=DERIVED, override=True)(_negate)
    pm.register_pass("_TestNeedsShape", requires=("shape",), override=True)(lambda g: g)
    stale = [(3,)]  # one value for a graph of two entries
    g = _graph().apply(["_TestNegate", "_TestNeedsShape"], shape=stale, shape_inputs={"x": (3,)})
    assert g.attrs["shape"] == [(3,)] * 3
