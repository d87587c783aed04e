"""The recurrent kernel's register tiles are stack allocations, on every product path
(``test_llvm_recurrent.REGISTER_PATHS``, also checked there against onnxruntime).

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
