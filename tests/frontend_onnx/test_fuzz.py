"""Bounded importer fuzzing in CI: mutated real models and random bytes give NNVMError or a
working graph, never another exception or a hang (scripts/fuzz_onnx.py runs longer)."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("onnx")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import fuzz_onnx  # noqa: E402


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzz_importer_bounded(seed):
    findings = fuzz_onnx.fuzz(cases=600, seed=seed, time_budget_s=25)
    assert not findings, "\n\n".join(f"case seed {s}:\n{f}" for s, f in findings[:5])


def test_fuzz_seed_models_import_cleanly():
    import nnvm

    for model in fuzz_onnx.seed_models():
        inits = {t.name for t in model.graph.initializer}
        shape = {i.name: tuple(d.dim_value or 64 for d in i.type.tensor_type.shape.dim)
                 for i in model.graph.input if i.name not in inits}
        graph, _ = nnvm.frontend.from_onnx(model, shape=shape, freeze={"sr": 16000} if
                                           "sr" in shape else None)
        assert graph.index.num_nodes > 0
