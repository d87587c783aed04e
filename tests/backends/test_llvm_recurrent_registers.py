"""The recurrent kernel's structure: its register tiles are stack allocations on every
product path (``test_llvm_recurrent.REGISTER_PATHS``, also checked there against
onnxruntime at 1 and 2 threads), and a one-direction layer of enough steps splits each
step's recurrent product across threads while a single step does not.

Why: TVM serves a ``local``-scope allocation, and any of 1 KB or more, from the runtime's
workspace (a call per kernel call, or per parallel task), and LLVM cannot tell that block
from the buffers the kernel reads, so a 16 x 16 accumulator tile could stay in memory. The
kernel now keeps its tiles as small global-scope buffers (stack slots LLVM promotes to
registers): a one-step GRU went from about 2.0 to 1.5 us. Speed is measured by
``benchmarks/bench_roofline.py``, not asserted here.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")
from test_llvm_par2t_recurrent import _recurrent_kernel_text  # noqa: E402
from test_llvm_recurrent import REGISTER_PATHS as CASES  # noqa: E402
from test_llvm_recurrent import _sequence_model  # noqa: E402  (one ONNX recurrent node)


def _allocations(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """``(printer call, shape)`` of every allocation in a kernel's TIR (the printer writes
    a local-scope one as ``T.alloc_local``)."""
    return [(call, tuple(int(v) for v in shape.split(",") if v.strip()))
            for call, shape in re.findall(r"T\.(alloc_\w+)\(\(([\d, ]*)\)", text)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_register_tiles_are_stack_allocations(case):
    op, seq, batch, n_in, hid, attrs = CASES[case]
    model, feed = _sequence_model(np.random.default_rng(0), op, seq, batch, n_in, hid, **attrs)
    allocs = _allocations(_recurrent_kernel_text(model, feed))
    assert allocs, "no allocation found: the TIR printer changed, update the parser"
    local = [a for a in allocs if a[0] != "alloc_buffer"]
    assert not local, f"local-scope tiles (served from the workspace): {local}"


#: (op, seq, batch, n_in, hid, attrs) -> parallel loops in the kernel: the input projection's
#: rows (and its weight transpose, where it takes column panels) and each step's weight
#: tiles, the step's only where the layer is long enough (``STEP_SPLIT_MIN_WORK``,
#: ``PARALLEL_MIN_WORK``): a per-frame step meets sleeping workers. Steps whose parts
#: compute their own gates (``claimed_steps``) have two: the launch of all steps, and the
#: one-thread loop run inline
SPLITS = [
    (("GRU", 64, 1, 128, 128, {"linear_before_reset": 1}), 4),  # 64 rows: panels
    (("LSTM", 8, 1, 128, 128, {}), 3),
    (("GRU", 24, 1, 64, 128, {}), 3),  # reset before R: two products a step, one loop each
    (("LSTM", 1, 1, 128, 128, {}), 0),
    (("LSTM", 16, 1, 32, 32, {}), 0),  # 4 K multiply-adds a step: not worth a launch
]


@pytest.mark.parametrize("case,loops", SPLITS, ids=[f"{c[0]}-{c[1]}x{c[4]}" for c, _ in SPLITS])
def test_long_one_direction_layer_splits_each_step(case, loops):
    op, seq, batch, n_in, hid, attrs = case
    model, feed = _sequence_model(np.random.default_rng(0), op, seq, batch, n_in, hid, **attrs)
    assert _recurrent_kernel_text(model, feed).count("T.parallel(") == loops
