"""Pass contracts held while the passes of nnvm-passes run (issue 15, Build item 3).

Regression tests for the three bugs found by running them: a rewrite followed by PlanMemory
died with a bare ``KeyError: 'shape'``; ``build(layout=...)`` was set after the pipeline ran;
``build_config(add_pass=[...])`` validated a pass the pipeline did not list, then never ran it.
"""

import os
import re

import numpy as np
import pytest

import nnvm
from nnvm import graph_attrs, sym
from nnvm import pass_manager as pm
from nnvm.errors import PassDependencyError
from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph, NodeEntry, make_node

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIMPLIFIABLE = sym.exp(sym.relu(sym.Variable("x")) * 1.0 + 0.0)  # SimplifyAlgebra drops 2 ops


def _inputs(shape=(2, 3)):
    return {"shape_inputs": {"x": shape}, "dtype_inputs": {"x": "float32"}}


def test_rewrite_then_plan_memory_re_runs_shape_and_type():
    """Bug 1: SimplifyAlgebra drops shape/dtype; PlanMemory needs them."""
    lines = []
    g = nnvm.graph.create(SIMPLIFIABLE).with_attrs(**_inputs())
    out = pm.apply_passes(g, ["InferShape", "InferType", "SimplifyAlgebra", "PlanMemory"],
                          log=lines.append)
    n = out.index.num_node_entries
    assert n == 3  # x, relu, exp
    assert len(out.attrs["shape"]) == len(out.attrs["dtype"]) == len(out.attrs["storage_id"]) == n
    assert out.attrs["shape"] == [(2, 3)] * 3
    ran = [line.split(":")[0] for line in lines]
    assert ran == ["InferShape", "InferType", "SimplifyAlgebra",
                   "InferShape (re-run for PlanMemory)", "InferType (re-run for PlanMemory)",
                   "PlanMemory"]


def test_a_pass_that_changes_nothing_keeps_derived_attributes():
    lines = []
    g = nnvm.graph.create(sym.exp(sym.Variable("x"))).with_attrs(**_inputs())
    out = pm.apply_passes(g, ["InferShape", "InferType", "SimplifyAlgebra", "PlanMemory"],
                          log=lines.append)
    assert not any("re-run" in line for line in lines)
    assert len(out.attrs["storage_id"]) == out.index.num_node_entries


def test_invalidated_attribute_without_an_analysis_names_dropper_and_provider():
    @pm.register_pass("_TestNeedsStorage", requires=("storage_id",), override=True)
    def needs_storage(g):
        return g

    lines = []
    g = nnvm.graph.create(SIMPLIFIABLE).with_attrs(**_inputs())
    with pytest.raises(PassDependencyError,
                       match=r"pass '_TestNeedsStorage': requires graph attribute 'storage_id', "
                             r"which pass 'SimplifyAlgebra' invalidated. It is provided by pass "
                             r"'PlanMemory'; run that after 'SimplifyAlgebra'"):
        pm.apply_passes(g, ["InferShape", "InferType", "PlanMemory", "SimplifyAlgebra",
                            "_TestNeedsStorage"], log=lines.append)
    assert lines == []  # found by the check before anything ran
    ok = pm.apply_passes(g, ["InferShape", "InferType", "SimplifyAlgebra", "PlanMemory",
                             "_TestNeedsStorage"])
    assert len(ok.attrs["storage_id"]) == ok.index.num_node_entries


def test_every_rewriting_pass_declares_invalidates_and_the_analyses_do_not():
    passes = pm.list_passes()
    for name in ("SimplifyAlgebra", "SimplifyInference", "EliminateDeadCode", "FoldScaleAxis",
                 "AlterOpLayout", "CorrectLayout", "PrecomputePrune", "OrderMutation"):
        assert DERIVED in passes[name].invalidates, name
    for name in ("InferShape", "InferType"):
        assert passes[name].analysis and not passes[name].invalidates
    for name in ("FuseOps", "PlanMemory"):
        assert not passes[name].invalidates and not passes[name].analysis
    assert not hasattr(passes["SimplifyAlgebra"], "change_graph")


def test_docs_list_the_invalidating_passes_and_the_analyses():
    text = open(os.path.join(ROOT, "docs", "passes.md"), encoding="utf-8").read()
    ours = {n: p for n, p in pm.list_passes().items() if p.provider in ("nnvm", "passes")}

    def listed(label):
        return set(re.search(label + r"`?: ([^.]+)\.", text).group(1).replace("\n", " ")
                   .split(", "))

    assert listed(r"Passes declared `invalidates=DERIVED") == {
        n for n, p in ours.items() if DERIVED in p.invalidates}
    assert listed(r"Analyses \(`analysis=True`, re-run when a later pass needs\s+what a "
                  r"rewrite dropped\)") == {n for n, p in ours.items() if p.analysis}


def test_every_declared_attribute_has_one_kind():
    table = graph_attrs.table()
    assert {table[k].kind for k in ("shape", "dtype", "storage_id", "layout")} == {"entry"}
    assert {table[k].kind for k in ("group_root", "device", "pattern")} == {"node"}
    assert table["layout_inputs"].kind == "graph" and not table["layout_inputs"].derived
    assert table["num_groups"].kind == "graph" and table["num_groups"].derived
    with pytest.raises(nnvm.NNVMError, match="already declared"):
        graph_attrs.declare("shape", "graph", "not per entry")
    with pytest.raises(nnvm.NNVMError, match="unknown kind"):
        graph_attrs.declare("_test_attr", "edge", "no such kind")


def test_fused_graph_loses_fusion_attributes_after_a_rewrite():
    g = nnvm.graph.create(SIMPLIFIABLE).with_attrs(**_inputs())
    fused = g.apply(["InferShape", "InferType", "FuseOps"])
    assert "group_root" in fused.attrs and "num_groups" in fused.attrs
    after = fused.apply("SimplifyAlgebra")
    assert not {"group_root", "group_master", "pattern", "num_groups", "shape"} & set(after.attrs)
    assert after.attrs["shape_inputs"] == {"x": (2, 3)}  # graph-level inputs stay


def _negate_outputs(graph):
    """A plugin-style rewrite the default pipeline does not list: outputs become -outputs."""
    outs = [NodeEntry(make_node("negative", [e], name=f"neg{i}"), 0)
            for i, e in enumerate(graph.outputs)]
    return Graph(outs, graph.attrs)


def test_add_pass_runs_a_pass_the_pipeline_does_not_list(rng):
    """Bug 3: build_config(add_pass=[...]) validated the name and never ran the pass."""
    pm.register_pass("_TestNegateOutputs", invalidates=DERIVED, override=True)(_negate_outputs)
    assert "_TestNegateOutputs" not in pm.get_pipeline("default")
    names = pm.opt_level_passes(2, enabled=["_TestNegateOutputs"])
    # after the last rewrite, before the analyses that close the pipeline
    assert names[-5:] == ["_TestNegateOutputs", "InferShape", "InferType", "FuseOps",
                          "PlanMemory"]
    assert "_TestNegateOutputs" not in pm.opt_level_passes(
        2, enabled=["_TestNegateOutputs"], disabled=["_TestNegateOutputs"])
    a = rng.standard_normal((2, 3)).astype("float32")
    net = sym.relu(sym.Variable("x"))
    with nnvm.compiler.build_config(add_pass=["_TestNegateOutputs"]):
        (got,) = nnvm.compiler.build(net, "reference", shape={"x": a.shape}).run(x=a)
    np.testing.assert_array_equal(got, -np.maximum(a, 0))


def test_add_pass_runs_the_example_plugins_fuse_swish():
    pytest.importorskip("nnvm_example")
    x = sym.Variable("x")
    net = x * sym.sigmoid(x)
    with nnvm.compiler.build_config(add_pass=["FuseSwish"]):
        lib = nnvm.compiler.build(net, "reference", shape={"x": (2, 3)})
    ops = [n.op.name for n in lib.graph.index.nodes if n.op is not None]
    assert ops == ["example_swish"]


def test_build_layout_reaches_correct_layout(rng):
    """Bug 2: build(layout=...) was set after optimize() ran and silently ignored."""
    pytest.importorskip("nnvm_passes")
    a = rng.standard_normal((1, 4, 4, 2)).astype("float32")  # NHWC
    net = sym.max_pool2d(sym.Variable("x"), pool_size=(2, 2), strides=(2, 2), layout="NCHW")
    lib = nnvm.compiler.build(net, "reference", shape={"x": a.shape}, layout={"x": "NHWC"})
    (got,) = lib.run(x=a)
    nchw = a.transpose(0, 3, 1, 2)
    want = nchw.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(got, want)


def test_change_graph_true_still_means_every_derived_attribute():
    pm.register_pass("_TestOldStyleRewrite", change_graph=True, override=True)(_negate_outputs)
    assert pm.get_pass("_TestOldStyleRewrite").invalidates == (DERIVED,)
    g = nnvm.graph.create(SIMPLIFIABLE).apply(["InferShape", "FuseOps", "_TestOldStyleRewrite"],
                                              **_inputs())
    assert not graph_attrs.derived() & set(g.attrs)
    assert g.attrs["shape_inputs"] == {"x": (2, 3)}


def test_an_undeclared_rewrite_leaves_stale_attributes_that_are_reported():
    pm.register_pass("_TestUndeclaredRewrite", override=True)(_negate_outputs)
    with pytest.raises(PassDependencyError, match="'shape', which is stale"):
        nnvm.graph.create(SIMPLIFIABLE).apply(["InferShape", "_TestUndeclaredRewrite",
                                               "FuseOps"], **_inputs())


def test_an_analysis_cannot_invalidate():
    with pytest.raises(nnvm.errors.PassError, match="is an analysis that invalidates"):
        pm.register_pass("_TestBadAnalysis", analysis=True, invalidates=("shape",),
                         override=True)(_negate_outputs)
