"""The default pipeline, the O0..O3 pipelines and switching passes by name."""

import numpy as np
import pytest

import nnvm
from nnvm.compiler import build_config
from nnvm.errors import PassError
from nnvm.pass_manager import get_pass, get_pipeline, opt_level_passes
from nnvm.testing.models import small_cnn
from nnvm_passes.pipelines import DEFAULT

NNVM_LEVELS = {"SimplifyInference": 0, "FuseOps": 1, "PrecomputePrune": 2,
               "FoldScaleAxis": 3, "AlterOpLayout": 3, "PlanMemory": 0}


def test_default_pipeline_order_and_nnvm_opt_levels():
    assert get_pipeline("default") == [n for n in DEFAULT if n in get_pipeline("default")]
    assert get_pipeline("default")[:2] == ["OrderMutation", "SimplifyInference"]
    assert get_pipeline("default")[-2:] == ["FuseOps", "PlanMemory"]
    for name, level in NNVM_LEVELS.items():
        assert get_pass(name).opt_level == level, name


def test_named_level_pipelines_grow_with_the_level():
    sizes = [len(get_pipeline(f"O{k}")) for k in range(4)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[3]
    assert "FoldScaleAxis" in get_pipeline("O3") and "FoldScaleAxis" not in get_pipeline("O2")
    assert "FuseOps" not in get_pipeline("O0")


def _build(**cfg):
    net, params, shapes = small_cnn()
    with build_config(**cfg):
        return nnvm.compiler.build(net, target="reference", shape=shapes, params=params)


def test_disabled_and_added_passes_by_name():
    assert "group_root" not in _build(opt_level=2, disabled_pass=["FuseOps"]).graph.attrs
    assert "group_root" in _build(opt_level=0, add_pass=["FuseOps"]).graph.attrs
    names = [n.op.name for n in _build(opt_level=2, add_pass=["FoldScaleAxis"]).graph.index.nodes
             if n.op is not None]
    assert "broadcast_mul" not in names
    with pytest.raises(PassError, match="FuseOps"):
        opt_level_passes(2, disabled=["FuseOp"])


def test_every_level_gives_the_same_result():
    net, params, shapes = small_cnn()
    x = np.random.default_rng(0).standard_normal(shapes["data"]).astype("float32")
    outs = [nnvm.compiler.build(net, target="reference", shape=shapes, params=params,
                                opt_level=k).run(data=x)[0] for k in range(4)]
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-4, atol=1e-5)


def test_pipeline_naming_an_unregistered_pass_says_which_and_who(monkeypatch):
    from nnvm import pass_manager

    monkeypatch.setitem(pass_manager._PIPELINES, "typo-pipe",
                        (["InferShape", "SimplifyAlgebr"], 10, "someplugin"))
    with pytest.raises(PassError) as err:
        get_pipeline("typo-pipe")
    msg = str(err.value)
    assert "pipeline 'typo-pipe' from someplugin" in msg and "SimplifyAlgebr" in msg
    assert "nnvm plugins" in msg
    with pytest.raises(PassError, match="is not registered"):
        get_pipeline("no-such-pipeline")
