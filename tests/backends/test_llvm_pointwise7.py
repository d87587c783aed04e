"""Pointwise convs on the pixel-GEMM template over planes whole pixel vectors all but
divide (7x7 = 3 vectors of 16 and 1 pixel; 1x17, 9x9) compute the whole vectors in
register tiles and the pixel or two left as scalars (``schedules._schedule_pixel_tail``),
instead of overlapping tiles that computed 64 pixels for 49.

Checked against onnxruntime at 1 and 2 threads on the shapes that take the path (7x7,
1x17 and 9x9 planes; output channels no vector divides, in tiles of 8 and 6; bias, ReLU
and residual-add epilogues; batch 2) and, as contrast, 5x5, 3x3 and 1x1 planes (the
overlapping tiles or the channel-vector template on AVX-512; the tail path on AVX2,
whose 8 lanes leave one pixel of 25 and 9); and the scheduled TIR pinned down: the tail
loop after the whole vectors, no overlap, no predicate.
"""

from __future__ import annotations

import pytest

from llvm_probe import skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()
onnx = pytest.importorskip("onnx")

from test_llvm_pointwise_tail import _scheduled_conv, check_against_onnxruntime  # noqa: E402


@pytest.mark.parametrize("n,ic,oc,h,w,epilogue", [
    (1, 80, 120, 7, 7, "relu"),       # 49 pixels: 3 vectors and 1 pixel, 15 channel tiles
    (1, 200, 200, 7, 7, "add_relu"),  # residual add and ReLU in the write-back
    (2, 24, 40, 7, 7, ""),            # batch 2: 10 channel tiles between the two images
    (1, 48, 60, 7, 7, "relu"),        # 6-channel tiles (60: no 8 or 16)
    (2, 40, 56, 1, 17, "relu"),       # 17 pixels: 1 vector and 1 pixel
    (1, 72, 136, 9, 9, "relu"),       # 81 pixels: 5 vectors and 1 pixel
    (1, 40, 56, 5, 5, "relu"),        # 25 pixels
    (2, 56, 56, 3, 3, "add_relu"),    # 9 pixels
    (2, 40, 56, 1, 1, "relu"),        # 1 pixel
])
@pytest.mark.parametrize("threads", [1, 2])
def test_pixel_tail_matches_onnxruntime(n, ic, oc, h, w, epilogue, threads):
    check_against_onnxruntime(n, ic, oc, h, w, epilogue, threads)


def test_seven_by_seven_plane_is_whole_vectors_and_a_scalar_pixel():
    text = _scheduled_conv(1, 80, 120, 7)
    assert "_pad" not in text and "T.where" not in text, text
    assert "T.min(" not in text and "nnvm_overlap_tail" not in text, text
    assert "T.parallel(15)" in text, text  # 120 channels in tiles of 8
    loops = [line.strip() for line in text.splitlines() if line.strip().startswith("for ")]
    tail = next(k for k, line in enumerate(loops) if line.endswith("in range(48, 49):"))
    whole, scalar = loops[:tail], loops[tail:tail + 3]
    assert any("T.unroll(3)" in line for line in whole), text  # 3 vectors x 8 channels
    assert any("T.vectorized(16)" in line for line in whole), text
    assert not any("T.vectorized" in line for line in scalar), text
