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

from llvm_probe import has_avx2, skip_without_llvm

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


@pytest.mark.parametrize("n,ic,oc,h,w,epilogue", [
    (1, 48, 60, 7, 7, "relu"),      # 49 pixels: 6 vectors of 8 and 1 pixel, 6-channel tiles
    (2, 56, 56, 7, 7, "add_relu"),  # batch 2, residual add (7 tasks an image)
    (1, 48, 60, 5, 5, ""),          # 25 pixels: 3 vectors and 1 pixel
    (2, 40, 60, 3, 3, "relu"),      # 9 pixels: 1 vector and 1 pixel
])
@pytest.mark.parametrize("threads", [1, 2])
def test_pixel_tail_on_eight_lane_vectors(n, ic, oc, h, w, epilogue, threads):
    """An AVX2 build (``-mcpu=haswell``) matches onnxruntime. Where the target reports 8
    lanes (``target.vector_lanes``), 7x7 is 6 vectors and 1 pixel in tiles of at most 12
    accumulators, and the 5x5 and 3x3 planes take the tail too; where it reports 16 (TVM
    0.27 on a Zen 4 host did), LLVM splits the 16-lane vectors of the 7x7 cases in two."""
    if not has_avx2():
        pytest.skip("needs an x86 CPU with AVX2 and FMA to run -mcpu=haswell code")
    check_against_onnxruntime(n, ic, oc, h, w, epilogue, threads, target="llvm -mcpu=haswell")


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
