"""A long one-direction LSTM/GRU/RNN on dot tiles runs its whole time loop as ONE parallel
launch whose tasks claim parts of each step (``recurrent_loop.claimed_steps``, the claims
in ``threadpool.c``'s ``nnvm_step_*``), and stays equal to onnxruntime at every thread
count: 1 (the steps serial, in a launch the pool runs inline), 2, 3 (parts of uneven
chunk counts) and 4 (more threads than the 2-core CI box has cores, so a part's thread is
often descheduled and the others take its parts or wait for it), each several runs in a
row of one library (a run's claims start from a fresh state), on odd chunk counts, batch
2, forward and reverse, fed initial states and ``sequence_lens`` (``layout`` 1 against
NNVM's reference kernel), and built for AVX2 (8-lane vectors) as well as for the
machine's own width.

Why: a launch per step cost about what splitting the step saved (a 64-step 128-unit GRU
as slow at 2 threads as at 1). Speed is measured by ``benchmarks/bench_roofline.py``, not
asserted here.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")
from llvm_probe import has_avx2  # noqa: E402
from test_llvm_recurrent_fused_step import (  # noqa: E402
    CASES, _kernel_text, _model, assert_runs_match, built_with_reference)

CLAIMED = sorted(name for name, case in CASES.items() if case[-1])


@pytest.mark.parametrize("case", CLAIMED)
def test_claimed_steps_match_onnxruntime_at_any_thread_count(case):
    lib, inputs, want = built_with_reference(case, 2)
    for threads in (1, 2, 3, 4, 2):
        assert_runs_match(lib, inputs, want, threads, runs=3)


@pytest.mark.parametrize("case", sorted(CASES))
def test_only_fused_steps_claim_parts(case):
    """The layers whose parts compute their own gates claim steps in one launch; the
    others (GRU with its reset before R, hidden sizes of part vectors) keep a launch per
    step's product."""
    op, seq, batch, n_in, hid, attrs, fused = CASES[case]
    model, feed = _model(np.random.default_rng(1), op, seq, batch, n_in, hid, attrs)
    text, _ = _kernel_text(model, feed)
    assert ("nnvm_step_claim" in text) == fused
    assert ("nnvm_step_wait" in text) == fused


@pytest.mark.parametrize("case", ["gru-7-chunks-batch2-reverse-lens", "lstm-9-chunks-lens"])
def test_claimed_steps_on_eight_lane_vectors(case):
    """The parts of an AVX2 build (``-mcpu=haswell``: 8-lane vectors, 14 and 18 chunks)
    match onnxruntime too, whatever vector width the test machine has."""
    if not has_avx2():
        pytest.skip("needs an x86 CPU with AVX2 and FMA to run -mcpu=haswell code")
    lib, inputs, want = built_with_reference(case, 3, target="llvm -mcpu=haswell")
    for threads in (1, 2, 3):
        assert_runs_match(lib, inputs, want, threads, runs=1)
