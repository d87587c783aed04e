"""``benchmarks/bench_roofline.py`` (issue 14): the roofline sweep on tiny synthetic workloads,
without the corpus. No timing assertions: the work and traffic of known shapes, the classes the
grid files workloads under, the bounded selection, and the shape of the table and JSON."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from nnvm.backend import get_backend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import bench_roofline  # noqa: E402
from roofline import grid, measure  # noqa: E402

REASON = get_backend("llvm", require_available=False).compiler_available()
needs_llvm = pytest.mark.skipif(REASON is not None, reason=str(REASON))


def _f32(shape, const=False):
    return {"shape": list(shape), "dtype": "float32", "const": const}


#: 3x3 conv, 3 -> 4 channels on 8x8, padded: out 1x4x8x8
CONV = grid.workload("Conv", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
                     [_f32((1, 3, 8, 8)), _f32((4, 3, 3, 3), True), _f32((4,), True)], 1, "t")
#: batch-1 GEMV, 64 -> 32 with bias
GEMV = grid.workload("Gemm", {"transB": 1},
                     [_f32((1, 64)), _f32((32, 64), True), _f32((32,), True)], 1, "t")
#: LSTM, 2 steps, batch 1, input 8, hidden 4 (gates 16)
LSTM = grid.workload("LSTM", {"hidden_size": 4},
                     [_f32((2, 1, 8)), _f32((1, 16, 8), True), _f32((1, 16, 4), True)], 1, "t")


def test_classes_of_conv_matmul_and_norms():
    assert CONV["cls"] == "conv2d" and GEMV["cls"] == "gemv" and LSTM["cls"] == "lstm"
    dw = grid.op_class("Conv", [[1, 32, 8, 8], [32, 1, 3, 3]], [False, True], {"group": 32})
    grouped = grid.op_class("Conv", [[1, 32, 8, 8], [32, 8, 3, 3]], [False, True],
                            {"group": 4})
    conv1d = grid.op_class("Conv", [[1, 16, 100], [16, 16, 3]], [False, True], {})
    assert (dw, grouped, conv1d) == ("conv2d-depthwise", "conv2d-grouped", "conv1d")
    assert grid.op_class("MatMul", [[1, 2, 32, 64], [1, 2, 64, 32]], [False, False],
                         {}) == "batch_matmul"
    assert grid.op_class("MatMul", [[1, 128, 768], [768, 768]], [False, True], {}) == "dense"
    assert grid.op_class("MatMul", [[1, 1, 768], [768, 768]], [False, True], {}) == "gemv"
    assert grid.op_class("LayerNormalization", [[1, 8]], [False], {}) == "layer_norm"


def test_select_is_bounded_and_keeps_the_odd_one():
    common = [grid.workload("Conv", {"kernel_shape": [3, 3]},
                            [_f32((1, c, 16, 16)), _f32((c, c, 3, 3), True)], 1, "m")
              for c in range(8, 40)]
    for w in common:
        w["count"] = 5
    odd = grid.workload("Conv", {"kernel_shape": [11, 11], "strides": [4, 4]},
                        [_f32((1, 3, 32, 32)), _f32((8, 3, 11, 11), True)], 1, "m")
    picked = grid.select(common + [odd, GEMV], ["conv2d"], 4)
    assert len(picked) == 4 and all(w["cls"] == "conv2d" for w in picked)
    assert odd in picked
    assert max(common, key=grid._bytes) in picked


@needs_llvm
def test_flops_and_bytes_of_known_shapes():
    for w, want_flops, want_bytes in (
            (CONV, 2 * (4 * 8 * 8) * (3 * 3 * 3), 4 * (3 * 64 + 4 * 27 + 4 + 4 * 64)),
            (GEMV, 2 * 32 * 64, 4 * (64 + 32 * 64 + 32 + 32)),
            (LSTM, 2 * 2 * (16 * 8 + 16 * 4), None)):
        model, feed = measure.onnx_model(w)
        graph, _ = measure.import_graph(model, feed)
        work, op = measure.flops(graph)
        assert work == want_flops, (w["op"], op)
        if want_bytes is not None:
            out = np.zeros((1, 4, 8, 8) if w is CONV else (1, 32), np.float32)
            assert measure.traffic(model, feed, [out]) == want_bytes


def test_cache_roof_has_a_call_floor_and_a_dram_tail():
    curve = [(1024, 4.0), (16384, 40.0)]  # 1 KiB in 256 ns, 16 KiB in 410 ns
    assert measure.bandwidth_at(curve, 16, dram=20.0) == pytest.approx(16 / 256)  # 256 ns
    assert measure.bandwidth_at(curve, 2048, dram=20.0) == 40.0
    assert measure.bandwidth_at(curve, 1 << 20, dram=20.0) == 20.0


def test_roofline_arithmetic():
    mem = measure.roofline(1e6, 1e6, 1e-3, peak_gflops=100.0, bw_gbs=10.0)
    assert mem["bound"] == "memory" and mem["attainable_gflops"] == pytest.approx(10.0)
    assert mem["achieved_gflops"] == pytest.approx(1.0) and mem["x_roofline"] == pytest.approx(10)
    cpu = measure.roofline(1e9, 1e6, 2e-2, peak_gflops=100.0, bw_gbs=10.0)
    assert cpu["bound"] == "compute" and cpu["x_roofline"] == pytest.approx(2.0)
    # a call floor of 10 ns on a kernel whose bytes take 20 ns at 10 GB/s: roof time 30 ns
    tiny = measure.roofline(100.0, 200, 60e-9, peak_gflops=100.0, bw_gbs=10.0, floor_s=10e-9)
    assert tiny["attainable_gflops"] == pytest.approx(100.0 / 30e-9 / 1e9)
    assert tiny["x_roofline"] == pytest.approx(2.0)  # 60 ns against 30
    assert measure.call_floor([(64, 8.0), (256, 30.0)]) == pytest.approx(8e-9)


@needs_llvm
def test_sweep_rows_summary_and_outputs(tmp_path):
    pytest.importorskip("onnxruntime")
    lines = []
    result = bench_roofline.sweep([CONV, GEMV], [1], blocks=1, seconds=0.001,
                                  log=lines.append, stream_bytes=4 << 20,
                                  cache_traffic=(1 << 10, 16 << 10), peak_matmul=64)
    rows = result["rows"]
    assert [r["cls"] for r in rows] == ["conv2d", "gemv"]
    from nnvm.runtime.profiler import cpu_peak_gflops
    assert result["meta"]["peak_gflops"][1] >= cpu_peak_gflops(1)[0]  # never below nominal
    assert "MatMul 64^3 onnxruntime" in result["meta"]["peak"]
    for r in rows:
        assert r["status"] == "ok", r
        assert r["nnvm_ms"] > 0 and r["ort_ms"] > 0 and r["max_rel_err"] < 1e-3, r
        assert r["x_roofline"] == pytest.approx(r["attainable_gflops"] / r["achieved_gflops"])
        assert r["attainable_gflops"] <= result["meta"]["peak_gflops"][1] + 1e-9, r
        # the roof's time includes one call of the smallest stream; "now" takes the DRAM
        # stream's bandwidth timed beside the workload
        floor = r["call_floor_ns"] / 1e9
        assert 0 < floor < 1e-5
        assert r["x_roofline"] == pytest.approx(measure.roofline(
            r["flops"], r["bytes"], r["nnvm_ms"] / 1e3, result["meta"]["peak_gflops"][1],
            result["meta"]["bandwidth_gbs"][1], floor)["x_roofline"])
        assert r["dram_gbs_now"] > 0 and r["x_roofline_now"] == pytest.approx(measure.roofline(
            r["flops"], r["bytes"], r["nnvm_ms"] / 1e3, result["meta"]["peak_gflops"][1],
            r["dram_gbs_now"], floor)["x_roofline"])
        assert r["cache_gbs"] > 0 and r["x_roofline_cache"] == pytest.approx(
            r["attainable_cache_gflops"] / r["achieved_gflops"])
    assert rows[0]["flops"] == 2 * (4 * 8 * 8) * (3 * 3 * 3)
    assert rows[1]["flops"] == 2 * 32 * 64 and rows[1]["bytes"] == 4 * (64 + 2048 + 32 + 32)
    summary = {s["cls"]: s for s in result["summary"]}
    assert set(summary) == {"conv2d", "gemv"}
    for s in summary.values():
        assert s["n"] == 1 and s["within"] == int(s["worst"] <= bench_roofline.TARGET)
        assert s["within_now"] == int(s["worst_now"] <= bench_roofline.TARGET)
    assert any("bandwidth" in line for line in lines)
    json.dumps(result)  # the --json document
    md = tmp_path / "roofline.md"
    bench_roofline.write_markdown(str(md), result["summary"], rows, result["meta"])
    text = md.read_text()
    assert "| conv2d | 1 | 1 |" in text and "| gemv | 1 | 1 |" in text
    assert "Gemm 1x64 W32x64 W32 transB=1" in text


@needs_llvm
def test_a_workload_that_fails_is_a_row_not_a_crash():
    bad = grid.workload("Conv", {"kernel_shape": [3, 3]},
                        [_f32((1, 3, 8, 8)), _f32((4, 5, 3, 3), True)], 1, "t")
    rows = bench_roofline.measure_workload(bad, [1], {1: 1.0}, {1: 1.0}, 1, 0.001, False)
    assert len(rows) == 1 and rows[0]["status"].startswith("failed:")
