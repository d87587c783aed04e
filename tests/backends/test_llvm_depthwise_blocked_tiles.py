"""The channel-blocked depthwise kernel (``nnvm_llvm.compiler.window_blocked``) writing each
register tile back NCHW straight from its accumulators, checked against onnxruntime at 1
and 2 threads.

Where a tile is the whole output row, or a multiple of 4 columns, the tile's results never
go through a workspace row: the write-back (with the bias) runs inside the tile loop. The
cases are the shapes that take that path (7 x 7 planes, strided and asymmetric rows of 7,
dilated 16 x 16 planes in two tiles of 8, batches, channel counts a vector divides) and the
ones that keep the row or the per-task write-back (rows of two 7-column tiles, a channel
count that leaves the last vector part empty); every case runs at 1 and 2 threads, where
the parallel loop over images x channel blocks splits (laid out as two halves of whole
tasks where the block count is even but not a multiple of the pool's 8 tasks).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
import nnvm  # noqa: E402
from llvm_probe import has_avx2  # noqa: E402
from nnvm_llvm.compiler.schedules import PARALLEL_MIN_WORK  # noqa: E402
from nnvm_llvm.compiler.window_blocked import _tile, _writes_back_per_tile, wants_blocked  # noqa: E402
from test_llvm_window_blocked import _scheduled_blocked, scheduled_blocked_max_pool  # noqa: E402
from test_llvm_flat_window_strided_rows import _model as _onnx_conv  # noqa: E402
from test_llvm_window_blocked_onnx import _geometry  # noqa: E402

CONVS = {
    # id: (input shape, kernel, stride, pads (top, left, bottom, right), dilation, bias);
    # each is work enough for the parallel loop (PARALLEL_MIN_WORK), odd block counts too
    "k5_7x7_tile_is_row": ((1, 256, 7, 7), 5, 1, (2, 2, 2, 2), 1, True),
    "k5_7x7_batch2_no_bias": ((2, 112, 7, 7), 5, 1, (2, 2, 2, 2), 1, False),
    "k5_9x7_asym_pads": ((1, 176, 9, 7), 5, 1, (2, 1, 2, 3), 1, True),
    "k3_s2_14x14_rows_of_7_batch2": ((2, 368, 14, 14), 3, 2, (1, 1, 1, 1), 1, True),
    "k5_8x8_tile_of_8": ((1, 208, 8, 8), 5, 1, (2, 2, 2, 2), 1, True),
    "k5_12x8_tile_of_8": ((1, 144, 12, 8), 5, 1, (2, 2, 2, 2), 1, False),
    "k5_dilated_16x16_two_tiles_batch2": ((2, 48, 16, 16), 5, 1, (4, 4, 4, 4), 2, True),
    # 36 and 10 blocks: the parallel loop laid out as halves of whole tasks
    "k5_7x7_36_blocks": ((1, 576, 7, 7), 5, 1, (2, 2, 2, 2), 1, True),
    "k5_dilated_16x16_10_blocks": ((1, 160, 16, 16), 5, 1, (4, 4, 4, 4), 2, False),
    # keep the row (two tiles of 7) / the per-task write-back (200 channels: 12.5 vectors)
    "k5_14x14_row_of_two_tiles": ((1, 64, 14, 14), 5, 1, (2, 2, 2, 2), 1, True),
    "k5_7x7_part_vector_batch2": ((2, 200, 7, 7), 5, 1, (2, 2, 2, 2), 1, True),
}


def _check_against_onnxruntime(case, threads, target="llvm", lanes=16):
    xs, k, s, pads, d, bias = CONVS[case]
    g = _geometry(xs, k, s, pads, d, lanes)
    assert wants_blocked(g, xs[1]), "the case must take the kernel"
    assert xs[0] * -(-xs[1] // lanes) * lanes * g.oh * g.ow * k * k >= PARALLEL_MIN_WORK
    rng = np.random.default_rng(59)
    model = _onnx_conv(xs, k, s, pads, d, bias, rng)
    xv = (rng.standard_normal(xs) * 3).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": xv})[0]
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": xs})
    lib = nnvm.compiler.build(graph, target=target, shape={"x": xs}, params=params)
    assert lib.stats()["schedule_fallbacks"] == []
    for t in threads:
        lib.set_num_threads(t)
        got = lib.run(x=xv)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CONVS))
def test_blocked_depthwise_tiles_match_onnxruntime(case, threads):
    _check_against_onnxruntime(case, [threads])


@pytest.mark.parametrize("case", ["k5_7x7_36_blocks", "k5_dilated_16x16_10_blocks",
                                  "k5_7x7_part_vector_batch2"])
def test_blocked_depthwise_tiles_on_eight_lane_vectors(case):
    """An AVX2 build (``-mcpu=haswell``: 8 channels a vector, so twice the blocks: 72, a
    multiple of the 8 tasks, and 20 and 50, laid out as halves) matches onnxruntime at 1
    and 2 threads, whatever vector width the test machine has."""
    if not has_avx2():
        pytest.skip("needs an x86 CPU with AVX2 and FMA to run -mcpu=haswell code")
    _check_against_onnxruntime(case, [1, 2], target="llvm -mcpu=haswell", lanes=8)


def test_only_whole_row_or_4_column_tiles_of_depthwise_convs_write_back_per_tile():
    """Rows of 7 (one tile) and tiles of 8 write back per tile; two tiles of 7 in a row of
    14, tiles of 5 and every pool keep the row."""
    assert _writes_back_per_tile("anchor_depthwise", 7, _tile(7))
    assert _writes_back_per_tile("anchor_depthwise", 16, _tile(16))
    assert not _writes_back_per_tile("anchor_depthwise", 14, _tile(14))
    assert not _writes_back_per_tile("anchor_depthwise", 20, _tile(20))
    assert not _writes_back_per_tile("anchor_pool", 7, _tile(7))


def _anchor_in_workspace(text: str) -> bool:
    """Whether one of the anchor's buffers (its result, its accumulators) is global."""
    allocs = [line for line in text.splitlines() if line.strip().startswith("anchor_depthwise")
              and "T.sblock_alloc_buffer(" in line]
    assert allocs, text
    return any('scope="local"' not in line for line in allocs)


def _inside_tile_loop(text: str) -> bool:
    """Whether the last block (the NCHW write-back) sits inside the tile loop ``j_0``
    (``for j_0 in range(...)``, or ``for i, j_0 in T.grid(...)`` with one tile a row)."""
    lines = text.splitlines()
    tile = next(k for k, line in enumerate(lines)
                if line.lstrip().startswith("for ") and "j_0 in " in line)
    depth = len(lines[tile]) - len(lines[tile].lstrip())
    back = next(k for k in range(len(lines) - 1, 0, -1) if "T.sblock(" in lines[k])
    return back > tile and all(len(line) - len(line.lstrip()) > depth
                               for line in lines[tile + 1:back + 1] if line.strip())


def test_a_whole_row_tile_is_written_back_from_its_accumulators():
    """7 x 7 planes (the tile is the row): the write-back runs inside the tile loop and the
    anchor's buffer is local (registers), no workspace row; 14 x 14 planes (two tiles of 7)
    keep the workspace row, written back once per row."""
    text = _scheduled_blocked((1, 48, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    assert not _anchor_in_workspace(text)
    assert _inside_tile_loop(text)
    text = _scheduled_blocked((1, 48, 14, 14), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    assert _anchor_in_workspace(text)
    assert not _inside_tile_loop(text)


def _parallel_extent(text: str) -> int:
    line = next(line for line in text.splitlines() if "T.parallel(" in line)
    return int(line.split("T.parallel(")[1].split(")")[0])


@pytest.mark.parametrize("channels,extent", [(576, 40), (224, 16), (1152, 72), (240, 15)])
def test_parallel_loop_halves_hold_half_the_blocks(channels, extent):
    """36 blocks run as 2 halves x 4 tasks x 5 iterations (18 blocks and 2 empty ones in
    each half, where TVM's cut gave the threads 20 and 16), 14 blocks as 2 x 4 x 2; 72
    blocks (a multiple of the 8 tasks) and 15 (odd) keep the plain loop."""
    text = _scheduled_blocked((1, channels, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    assert _parallel_extent(text) == extent
    assert ("T.where(" in text) == (extent != -(-channels // 16))



def test_pools_keep_the_plain_parallel_loop():
    """A blocked max pool over 52 blocks (832 channels) keeps TVM's cut: the predicates of
    the halves cost its light body 1.8% at 1 thread."""
    text = scheduled_blocked_max_pool((1, 832, 7, 7))
    assert _parallel_extent(text) == 52 and "T.where(" not in text
