"""The main job: compile a small bundled model for the best available target, run it, time it.

Loads ``examples/models/digits_mlp`` (a 64-32-10 MLP trained on scikit-learn's 8x8 digits),
preferring the ``.onnx`` file through ``nnvm.frontend`` when an ONNX frontend plugin is
installed and available, and otherwise the NNVM graph JSON + param dict (core only). Then it
builds with ``nnvm.compiler.build`` for ``nnvm.backend.best_target()`` (or ``--target``), runs
the bundled held-out digits, prints predictions, accuracy and timings, and checks the outputs
against the NumPy reference interpreter (the oracle). Exits 1 if they disagree.

Usage: ``hatch run demo`` or ``python examples/demo.py [--target T] [--format auto|onnx|json]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import nnvm
from nnvm.backend import best_target

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")


def load_model(name: str, fmt: str, shape: dict) -> tuple:
    """``(graph, params, source)``: ONNX through the frontend plugin if usable, else JSON."""
    onnx_path = os.path.join(MODELS, f"{name}.onnx")
    if fmt in ("auto", "onnx") and os.path.exists(onnx_path):
        frontend = nnvm.frontend.for_path(onnx_path)
        reason = "no installed frontend reads .onnx" if frontend is None else \
            frontend.is_available()
        if reason is None:
            graph, params = nnvm.frontend.from_onnx(onnx_path, shape=shape)
            return graph, params, f"{os.path.relpath(onnx_path)} (frontend '{frontend.name}')"
        if fmt == "onnx":
            raise SystemExit(f"demo: cannot import {onnx_path}: {reason}")
        print(f"note: ONNX frontend not usable ({reason}); using the NNVM graph JSON")
    base = os.path.join(MODELS, name)
    with open(f"{base}.json", encoding="utf-8") as f:
        graph = nnvm.graph.load_json(f.read())
    with open(f"{base}.params", "rb") as f:
        params = nnvm.compiler.load_param_dict(f.read())
    return graph, params, f"{os.path.relpath(base)}.json + .params"


def time_runs(lib, data: np.ndarray, repeat: int) -> list[float]:
    """Milliseconds per ``run`` call, after one warm-up run."""
    lib.run(data=data)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        lib.run(data=data)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compile and run a bundled model with NNVM.")
    ap.add_argument("--model", default="digits_mlp", help="bundled model name")
    ap.add_argument("--target", default=None, help="target string; default: best available")
    ap.add_argument("--format", choices=("auto", "onnx", "json"), default="auto",
                    help="model file to load (auto: ONNX when a frontend can read it)")
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=50, help="timed runs")
    args = ap.parse_args(argv)

    samples = np.load(os.path.join(MODELS, f"{args.model}.samples.npz"))
    data, labels = samples["data"], samples["label"]
    target = args.target or best_target()
    print(f"nnvm {nnvm.__version__}; plugins: " + ", ".join(
        p.name + ("" if p.available else " (unavailable)") for p in nnvm.plugins()))

    graph, params, source = load_model(args.model, args.format, {"data": data.shape})
    print(f"model: {source}")
    t0 = time.perf_counter()
    lib = nnvm.compiler.build(graph, target=target, shape={"data": data.shape}, params=params,
                              opt_level=args.opt_level)
    build_ms = (time.perf_counter() - t0) * 1e3
    print(f"target: {lib.target} (best available: {best_target()}); "
          f"build at opt_level {args.opt_level}: {build_ms:.1f} ms")

    (prob,) = lib.run(data=data)
    times = time_runs(lib, data, args.repeat)
    pred = prob.argmax(axis=1)
    print(f"output '{lib.output_names[0]}': shape {prob.shape}, dtype {prob.dtype}")
    print(f"predicted: {' '.join(map(str, pred))}")
    print(f"labels:    {' '.join(map(str, labels))}")
    print(f"accuracy on {len(labels)} held-out digits: {np.mean(pred == labels):.3f}")
    print(f"run (batch {data.shape[0]}): median {np.median(times):.3f} ms, "
          f"min {np.min(times):.3f} ms over {args.repeat} runs")
    stats = lib.stats()
    print("stats: " + ", ".join(f"{k}={stats[k]}" for k in (
        "num_nodes", "num_kernels", "activation_bytes", "activation_bytes_naive")))

    oracle = nnvm.compiler.build(graph, target="reference", shape={"data": data.shape},
                                 params=params, opt_level=0)
    (want,) = oracle.run(data=data)
    diff = float(np.max(np.abs(prob - want)))
    ok = np.allclose(prob, want, rtol=1e-4, atol=1e-5)
    print(f"max |difference| vs reference interpreter: {diff:.2e} ({'ok' if ok else 'MISMATCH'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
