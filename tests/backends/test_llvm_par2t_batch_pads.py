"""A batch matmul whose operands the lowering zero-pads to whole register tiles (M and N no
tile divides: ViT's 197 tokens, a 7x7 window's 49) runs one parallel task per batch, each
task padding its own batch's operands (``schedules._batch_pads``) and, for mid-sized
outputs, slicing its own output (``schedules.SLICE_COPY``); the kernels of these
shapes are checked against numpy at 1 and 2 threads in ``test_llvm_parallel_split.py``.

Why: the padded copies were passes of their own, on one thread before the parallel body,
and the other thread read its half from the first core's cache: in the idle roofline sweep
``1x2x49x64 @ 1x2x64x49`` took as long at 2 threads as at 1 (10.5 us). The structural check
pins down where the copies lie (speed is measured by ``benchmarks/bench_roofline.py``, not
asserted here); a matmul with nothing padded keeps its row tiles as tasks.
"""

from __future__ import annotations

import pytest

import nnvm.symbol as sym
from llvm_probe import skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()


def _scheduled(a_shape, b_shape) -> str:
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule
    from nnvm_llvm.tuning.tuner import _prepare

    y = sym.matmul(sym.Variable("a"), sym.Variable("b"))
    graph, params = _prepare(y, {"a": a_shape, "b": b_shape}, "float32", {}, 3)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "matmul"]
    info = gl.schedule_info(16)
    text = str(schedule(gl.primfunc(16), info))
    assert info.applied
    return text


def _pads_before_and_after_parallel(text: str) -> tuple[int, int]:
    par = text.index("T.parallel(")
    return text[:par].count('T.sblock("T_transpose_lane_pad'), \
        text[par:].count('T.sblock("T_transpose_lane_pad')


@pytest.mark.parametrize("a_shape,b_shape,batches", [
    ((1, 2, 49, 64), (1, 2, 64, 49), 2),
    ((1, 2, 197, 64), (1, 2, 64, 197), 2),
    ((2, 3, 37, 64), (2, 3, 64, 45), 6),   # two batch axes, fused into one task loop
])
def test_padded_batch_matmul_pads_inside_its_batch_tasks(a_shape, b_shape, batches):
    text = _scheduled(a_shape, b_shape)
    assert f"T.parallel({batches})" in text, text
    before, inside = _pads_before_and_after_parallel(text)
    assert before == 0 and inside >= 1, text


def test_unpadded_batch_matmul_keeps_row_tasks():
    text = _scheduled((1, 2, 64, 64), (1, 2, 64, 64))
    assert "T_transpose_lane_pad" not in text
    assert "T.parallel(2)" not in text and "T.parallel(" in text, text


@pytest.mark.parametrize("a_shape,b_shape,copied", [
    ((1, 2, 197, 64), (1, 2, 64, 197), True),    # ViT's scores: 200 x 208 padded per batch
    ((1, 2, 49, 64), (1, 2, 64, 49), False),     # small: the slice stays in the write-back
    ((1, 2, 1500, 64), (1, 2, 64, 1500), False),  # past L2: no second pass over memory
])
def test_output_slice_is_copied_per_batch_task_in_its_size_window(a_shape, b_shape, copied):
    text = _scheduled(a_shape, b_shape)
    par = text.index("T.parallel(")
    assert ('T.sblock("matmul_0_unpad")' in text[par:]) == copied, text
    assert 'T.sblock("matmul_0_unpad")' not in text[:par], text
