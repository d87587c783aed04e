"""Where a run's time goes: per-step time, FLOPs, achieved GFLOP/s and share of the machine's
peak, as a table (``nnvm bench --profile``) and a Chrome/Perfetto trace (``--trace``).

Why FLOPs and peak, not just milliseconds: a slow kernel is only worth attacking when it is far
from what the machine allows for its work; "3 ms at 4% of peak" says schedule, "3 ms at 70%"
says the op is simply big.

A module that can time its steps provides ``profile(repeat, warmup) -> [(name, seconds)]`` and
``step_nodes() -> [[node id, ...]]`` (the graph nodes each step computes); today the ``llvm``
target does. FLOPs are counted from the graph's shapes: 2 per multiply-add for convolutions,
dense and matmul-like ops and the gate GEMMs of recurrent cells; one per window element of
each pooling output and per input element of a reduction or global pool (they read everything
once); a fixed count per element for the normalisations and softmax (their passes over the data:
`_PER_ELEMENT`) and ``2 x size + 3`` for LRN; 1 per output element for everything else (an
estimate that keeps elementwise kernels visible without pretending to know their instruction
mix). Why not 1 everywhere: a softmax or layer norm at 1 FLOP per element looked 4-5x further
from the peak than it is, and a pool's share said nothing about its window. The peak is ``vector lanes x 2 (FMA) x FMA units x clock x threads``
read off this CPU; the FMA-unit count is a stated assumption (2 on Intel cores with AVX-512 or
AVX2, 1 512-bit unit on AMD Zen 4, which splits AVX-512 into two 256-bit halves), so treat the
share of peak as a guide.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import NNVMError, format_error

#: ops whose FLOPs are 2 x (output elements) x (reduction length)
_MAC_OPS = {"conv2d", "conv", "dense", "matmul", "batch_matmul", "conv_transpose",
            "conv2d_transpose", "matmul_integer",
            "conv_integer"}
#: recurrent cells: X @ W^T and H @ R^T at every step of every direction
_RECURRENT_OPS = {"lstm", "gru", "rnn"}
#: windowed ops: one FLOP per window element of each output (compare, or add)
_WINDOW_OPS = {"max_pool", "max_pool2d", "avg_pool", "avg_pool2d", "lp_pool"}
#: ops that read their whole input once to produce a smaller output
_READ_ALL_OPS = {"global_avg_pool", "global_avg_pool2d", "global_max_pool", "global_max_pool2d",
                 "global_lp_pool", "sum", "mean", "max", "min", "prod", "collapse_sum_like"}
#: FLOPs per element of passes-over-the-data ops: softmax = max, subtract + exp, sum, scale;
#: the normalisations = mean, variance (2), normalise, scale + shift
_PER_ELEMENT = {"softmax": 4, "log_softmax": 4, "layer_norm": 5, "group_norm": 5,
                "instance_norm": 5, "mean_variance_normalization": 4, "rms_norm": 4,
                "lp_normalization": 3, "batch_norm": 2}


@dataclass
class StepProfile:
    """One step of a run: its name, median seconds, estimated FLOPs and the ops it fuses."""

    name: str
    seconds: float
    flops: float
    ops: list[str] = field(default_factory=list)


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def node_flops(graph, nid: int) -> float:
    """Estimated FLOPs of one node (see the module docstring)."""
    idx = graph.index
    node = idx.nodes[nid]
    shapes = graph.attrs.get("shape") or []
    rptr = idx.entry_rptr
    out = shapes[rptr[nid]] if rptr[nid] < len(shapes) else None
    if node.op is None or out is None:
        return 0.0
    ins = [shapes[rptr[i] + k] if rptr[i] + k < len(shapes) else None
           for i, k, _ in idx.inputs[nid]]
    name = node.op.name
    if name in _MAC_OPS and len(ins) >= 2 and ins[0] is not None and ins[1] is not None:
        data, weight = ins[0], ins[1]
        if name in ("conv2d", "conv", "conv_integer"):
            return 2.0 * _prod(out) * _prod(weight[1:])
        if name in ("conv_transpose", "conv2d_transpose"):
            return 2.0 * _prod(data) * _prod(weight[1:])
        return 2.0 * _prod(out) * int(data[-1])  # dense / matmul: K = data's last axis
    if name in _RECURRENT_OPS and len(ins) >= 3 and all(s is not None for s in ins[:3]):
        # X is (steps, batch, input) or (batch, steps, input); W, R (dirs, gates*H, I or H)
        return 2.0 * _prod(ins[0][:-1]) * (_prod(ins[1]) + _prod(ins[2]))
    window = node.attrs.get("pool_size") or node.attrs.get("kernel_shape")  # 2-D / N-d pools
    if name in _WINDOW_OPS and window:
        return float(_prod(out) * _prod(window))
    if name in _READ_ALL_OPS and ins and ins[0] is not None:
        return float(_prod(ins[0]))
    if name == "lrn":
        return float(_prod(out) * (2 * int(node.attrs.get("size", 1)) + 3))
    return float(_prod(out) * _PER_ELEMENT.get(name, 1))


def cpu_peak_gflops(threads: int | None = None) -> tuple[float, str]:
    """``(peak GFLOP/s for float32, how it was derived)`` for this CPU and thread count."""
    flags, vendor, mhz = set(), "", 0.0
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "flags" and not flags:
                    flags = set(value.split())
                elif key == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key == "cpu MHz" and not mhz:
                    mhz = float(value)
    except OSError:
        pass
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            mhz = int(f.read()) / 1000.0
    except (OSError, ValueError):
        pass
    lanes = 16 if "avx512f" in flags else (8 if "avx2" in flags or "avx" in flags else 4)
    fma = 2 if ("fma" in flags or "avx512f" in flags) else 1
    units = 1 if (lanes == 16 and "AMD" in vendor) else 2
    threads = threads or os.cpu_count() or 1
    ghz = (mhz or 2000.0) / 1000.0
    peak = lanes * fma * units * ghz * threads
    how = (f"{lanes} lanes x {fma} (FMA) x {units} unit(s) x {ghz:.2f} GHz x {threads} "
           f"thread(s){'' if mhz else ' (clock unknown: 2 GHz assumed)'}")
    return peak, how


def profile_module(module, repeat: int = 20, warmup: int = 2) -> list[StepProfile]:
    """Time every step of ``module`` (inputs already bound) with its FLOPs.

    Raises:
        NNVMError: the module's target cannot time its steps.
    """
    if not hasattr(module, "profile"):
        raise NNVMError(format_error(
            f"target '{module.target}'", "cannot time its steps (no per-step profiler)",
            fix="Profile the model built for 'llvm', or time whole runs with nnvm bench"))
    timed = module.profile(repeat=repeat, warmup=warmup)
    nodes = module.step_nodes() if hasattr(module, "step_nodes") else [[] for _ in timed]
    idx = module.graph.index
    out = []
    for (name, seconds), nids in zip(timed, nodes):
        out.append(StepProfile(name, seconds, sum(node_flops(module.graph, n) for n in nids),
                               [idx.nodes[n].op.name for n in nids
                                if idx.nodes[n].op is not None]))
    return out


def format_table(steps: list[StepProfile], peak_gflops: float, how: str, top: int = 30) -> str:
    """The steps sorted by time: ms, share of the run, GFLOP, GFLOP/s, share of peak."""
    total = sum(s.seconds for s in steps) or 1e-12
    lines = [f"{'step':<44} {'ms':>8} {'%run':>6} {'GFLOP':>8} {'GFLOP/s':>8} {'%peak':>6}  ops"]
    for s in sorted(steps, key=lambda s: -s.seconds)[:top]:
        rate = s.flops / s.seconds / 1e9 if s.seconds > 0 else 0.0
        lines.append(f"{s.name[:44]:<44} {s.seconds * 1e3:>8.3f} {100 * s.seconds / total:>6.1f} "
                     f"{s.flops / 1e9:>8.4f} {rate:>8.1f} {100 * rate / peak_gflops:>6.1f}  "
                     f"{'+'.join(s.ops)[:40]}")
    flops = sum(s.flops for s in steps)
    lines.append(f"{len(steps)} steps, {total * 1e3:.3f} ms, {flops / 1e9:.4f} GFLOP, "
                 f"{flops / total / 1e9:.1f} GFLOP/s = {100 * flops / total / 1e9 / peak_gflops:.1f}"
                 f"% of peak {peak_gflops:.0f} GFLOP/s ({how})")
    return "\n".join(lines)


def chrome_trace(steps: list[StepProfile]) -> dict:
    """The steps as one run laid end to end (median durations) in the Chrome trace event
    format that chrome://tracing and ui.perfetto.dev open."""
    events, t = [], 0.0
    for s in steps:
        dur = s.seconds * 1e6
        events.append({"name": s.name, "cat": "kernel", "ph": "X", "ts": round(t, 3),
                       "dur": round(dur, 3), "pid": 0, "tid": 0,
                       "args": {"ops": s.ops, "gflop": s.flops / 1e9,
                                "gflops_per_s": s.flops / s.seconds / 1e9 if s.seconds else 0}})
        t += dur
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(steps: list[StepProfile], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(chrome_trace(steps), f)
