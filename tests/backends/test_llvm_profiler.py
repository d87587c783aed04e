"""``nnvm bench --profile`` / ``--trace``: per-step times with FLOPs, GFLOP/s and share of the
CPU's peak, and a Chrome trace with one event per step."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nnvm
from nnvm import cli, sym
from nnvm.backend import build_reason, get_backend
from nnvm.errors import BackendUnavailableError, NNVMError
from nnvm.runtime import profiler


def _llvm_reason():
    try:
        return build_reason(get_backend("llvm", require_available=False))
    except BackendUnavailableError as exc:
        return str(exc)


def _net():
    x = sym.Variable("x")
    y = sym.conv2d(x, channels=8, kernel_size=(3, 3), padding=(1, 1), name="c1")
    y = sym.dense(sym.flatten(sym.relu(y)), units=10, name="fc")
    return y, {"x": (1, 3, 16, 16)}


def _params(net, shapes):
    lib = nnvm.compiler.build(net, target="reference", shape=shapes, opt_level=0)
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(lib.input_shapes[n]).astype("float32")
            for n in lib.input_shapes if n not in shapes}


def test_flops_of_conv_and_dense_are_exact():
    net, shapes = _net()
    lib = nnvm.compiler.build(net, target="reference", shape=shapes, params=_params(net, shapes),
                              opt_level=0)
    idx = lib.graph.index
    by_op = {idx.nodes[n].op.name: profiler.node_flops(lib.graph, n)
             for n in range(len(idx.nodes)) if idx.nodes[n].op is not None}
    assert by_op["conv2d"] == 2 * (8 * 16 * 16) * (3 * 3 * 3)
    assert by_op["dense"] == 2 * 10 * (8 * 16 * 16)
    assert by_op["relu"] == 8 * 16 * 16


def test_peak_is_positive_and_explained():
    peak, how = profiler.cpu_peak_gflops(2)
    assert peak > 0 and "lanes" in how and "2 thread(s)" in how


def test_a_target_without_step_timing_says_so():
    net, shapes = _net()
    lib = nnvm.compiler.build(net, target="reference", shape=shapes, params=_params(net, shapes))
    with pytest.raises(NNVMError, match="cannot time its steps"):
        profiler.profile_module(lib)


@pytest.mark.llvm
@pytest.mark.skipif(_llvm_reason() is not None, reason=f"llvm unavailable: {_llvm_reason()}")
def test_bench_profile_and_trace(tmp_path, capsys):
    net, shapes = _net()
    lib = nnvm.compiler.build(net, target="llvm", shape=shapes, params=_params(net, shapes))
    art, trace = tmp_path / "m.nnvm", tmp_path / "trace.json"
    lib.export(str(art))
    assert cli.main(["bench", str(art), "--profile", "--trace", str(trace), "--repeat", "5",
                     "-q"]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "% of peak" in out
    rows = [line for line in out.splitlines() if line.startswith(("nnvm_", "reference:"))]
    events = json.loads(trace.read_text())["traceEvents"]
    assert len(events) == len(rows) == lib.stats()["num_kernels"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    conv = [e for e in events if "conv2d" in e["args"]["ops"]]
    mac = 2 * 8 * 256 * 27  # the conv; fused elementwise ops add one per output element each
    extra = (len(conv[0]["args"]["ops"]) - 1) * 8 * 256 if conv else 0
    assert conv and conv[0]["args"]["gflop"] == pytest.approx((mac + extra) / 1e9)
    assert cli.main(["bench", str(art), "--profile", "--json", "--repeat", "3", "-q"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["profile"]["peak_gflops"] > 0 and len(report["profile"]["steps"]) == len(rows)


def test_flops_of_windows_reductions_and_normalisations():
    x = sym.Variable("x")
    y = sym.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1), name="pool")
    y = sym.lrn(y, size=5, axis=1, alpha=1e-4, beta=0.75, bias=2.0, name="lrn")
    y = sym.global_avg_pool2d(sym.softmax(y, name="sm"), name="gap")
    lib = nnvm.compiler.build(y, target="reference", shape={"x": (1, 4, 8, 8)}, opt_level=0)
    idx = lib.graph.index
    by_op = {idx.nodes[n].op.name: profiler.node_flops(lib.graph, n)
             for n in range(len(idx.nodes)) if idx.nodes[n].op is not None}
    out = 4 * 4 * 4  # the pool's output elements
    assert by_op["max_pool2d"] == out * 9  # one compare per window element
    assert by_op["lrn"] == out * (2 * 5 + 3)
    assert by_op["softmax"] == out * 4  # max, exp, sum, scale
    assert by_op["global_avg_pool2d"] == out  # reads its input once
