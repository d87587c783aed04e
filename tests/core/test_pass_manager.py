"""Pass registry and manager: dependency checks before running, pipelines, IR dumps."""

import pytest

import nnvm
from nnvm import pass_manager as pm
from nnvm import sym
from nnvm.errors import PassDependencyError, PassError


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
