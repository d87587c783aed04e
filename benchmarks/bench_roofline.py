"""How far each llvm kernel is from the roofline of its shape, over shapes drawn from the corpus.

Why: issue 14's "no slow path" asks that every conv (1-D/2-D/3-D, grouped, depthwise, odd
sizes), dense / GEMV / batch-matmul, pooling, LRN, normalisation, softmax and recurrent cell
runs within 2x of what this machine allows for its shape. That bound is the roofline:
attainable GFLOP/s = min(peak, arithmetic intensity x memory bandwidth), with the peak from
``nnvm.runtime.profiler.cpu_peak_gflops`` and the bandwidth measured at start (see
``roofline.measure.bandwidth``). The shapes are the distinct workloads of the cached real-model
corpus (``roofline.grid``; extracted once and cached as JSON), bounded per class.

For each workload: a one-op ONNX graph, imported and built for ``llvm`` (opt_level 3), timed
per thread count (median of ``--blocks`` blocks of ``--min-seconds``, kernels on bound inputs,
timed inside nnvm's C executor so that a sub-microsecond kernel is not measured as the cost of
a Python call) next to onnxruntime on the same graph (through its Python API with bound
inputs, so its figure for a tiny kernel includes that API's per-call cost) (context: a kernel slower than onnxruntime's is a
schedule problem whatever the roof says). Printed per workload: achieved and attainable
GFLOP/s and "x roof" = attainable / achieved (1.0 = on the roof, 2.0 = half of it); per class
the worst and median "x roof" and how many are within 2x. The roof's time includes one
kernel call (``measure.call_floor``: the 64-byte stream's call, ~8 ns): a roof of bytes and
FLOPs alone asks a 30-ns kernel to beat the cost of calling it.

"x now" is "x roof" with the DRAM bandwidth the stream kernel of ``measure.bandwidth`` got in
the workload's own interleaved blocks (``measure.DramProbe``) instead of the sweep's start:
on a VM sharing its host's memory bus the bandwidth of the start is not the bandwidth of ten
minutes later (the same depthwise conv took 640 us in one sweep, 1,445 us in the next).
Compute-bound roofs are unchanged by it.

"x cache" is the same against a cache-aware roof: the bandwidth that a compiled stream kernel
moving the same number of bytes reaches (``measure.cache_bandwidth``). A kernel timed on the
same buffers over and over runs from cache when its data fit, so a mid-sized kernel can sit
under the DRAM roof while far from what the machine does with that many bytes; and a kernel
of a few bytes cannot beat the cost of one call, which the DRAM roof ignores. "x cache" holds
at both ends.

    python benchmarks/bench_roofline.py [--classes conv2d,gemv] [--max-per-class 12]
        [--threads 1,2] [--blocks 5] [--min-seconds 0.05] [--no-ort] [--no-extras]
        [--no-dram-probe]
        [--grid GRID.json] [--refresh-grid] [--json out.json] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline import grid, measure  # noqa: E402

#: a workload is on target when its time is within this factor of the roofline's
TARGET = 2.0


def _size(nbytes: int) -> str:
    """64B, 16K, 4M: a stream's traffic in the header."""
    for unit, shift in (("M", 20), ("K", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift}{unit}"
    return f"{nbytes}B"


def describe(w: dict) -> str:
    """One short line for a workload: input shapes (weights marked W) and its attributes."""
    shapes = " ".join(("W" if i["const"] else "") + "x".join(map(str, i["shape"]))
                      for i in w["inputs"] if i)
    skip = ("alpha", "beta", "epsilon") if w["op"] != "LRN" else ()
    attrs = " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
                     for k, v in w["attrs"].items() if k not in skip)
    return f"{w['op']} {shapes}" + (f" {attrs}" if attrs else "")


def measure_workload(w: dict, threads: list[int], peaks: dict, bws: dict, blocks: int,
                     seconds: float, with_ort: bool, curves: dict | None = None,
                     probe: measure.DramProbe | None = None) -> list[dict]:
    """One row per thread count for workload ``w`` (a failed build or run is one row with
    its status); ``curves``: the cache-level bandwidths (``measure.cache_bandwidth``);
    ``probe``: the DRAM stream timed in the same interleaved blocks, whose drift since the
    sweep's start gives the "x roof now" column (``measure.DramProbe``)."""
    base = {"cls": w["cls"], "workload": describe(w), "models": w["models"][:3],
            "count": w["count"]}
    try:
        model, feed = measure.onnx_model(w)
        graph, params = measure.import_graph(model, feed)
        work, op = measure.flops(graph)
        lib = measure.build(graph, params, feed)
        ours = lib.run(**feed)
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        return [{**base, "status": f"failed: {type(exc).__name__}: {str(exc)[:120]}"}]
    nbytes = measure.traffic(model, feed, ours)
    base.update(flops=work, flop_op=op, bytes=nbytes,
                fallbacks=lib.stats().get("num_fallback_kernels", 0))
    rows = []
    for t in threads:
        lib.set_num_threads(t)
        runners = {"nnvm": measure.nnvm_block(lib, seconds)}
        if probe is not None:
            runners["dram"] = probe.block(t)
            lib.set_num_threads(t)
        row = {**base, "threads": t, "status": "ok"}
        if with_ort:
            try:
                sess = measure.ort_session(model, t)
                theirs = sess.run(None, feed)
                row["max_rel_err"] = max(
                    float(np.abs(a - b).max() / (np.abs(b).max() + 1e-30))
                    for a, b in zip(ours, theirs))
                call = measure.ort_runner(sess, feed)
                runners["onnxruntime"] = lambda call=call: measure.per_call(call, seconds)
            except Exception as exc:  # noqa: BLE001 - context only
                row["onnxruntime"] = f"failed: {type(exc).__name__}"
        times = measure.interleaved(runners, blocks)
        row["nnvm_ms"] = times["nnvm"] * 1e3
        if "onnxruntime" in times:
            row["ort_ms"] = times["onnxruntime"] * 1e3
            row["vs_ort"] = times["nnvm"] / times["onnxruntime"]
        floor = measure.call_floor(curves[t]) if curves else 0.0
        row.update(measure.roofline(work, nbytes, times["nnvm"], peaks[t], bws[t], floor),
                   call_floor_ns=floor * 1e9)
        if "dram" in times:
            bw_now = probe.gbs(times["dram"])
            now = measure.roofline(work, nbytes, times["nnvm"], peaks[t], bw_now, floor)
            row.update(dram_gbs_now=bw_now, attainable_now_gflops=now["attainable_gflops"],
                       x_roofline_now=now["x_roofline"])
        if curves:
            bw = measure.bandwidth_at(curves[t], nbytes, bws[t])
            cached = measure.roofline(work, nbytes, times["nnvm"], peaks[t], bw)
            row.update(cache_gbs=bw, attainable_cache_gflops=cached["attainable_gflops"],
                       x_roofline_cache=cached["x_roofline"])
        if "ort_ms" in row:
            row["ort_x_roofline"] = measure.roofline(work, nbytes, times["onnxruntime"],
                                                     peaks[t], bws[t], floor)["x_roofline"]
        rows.append(row)
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Per class and thread count: workloads, worst and median "x roof", how many within 2x,
    the geometric mean of nnvm / onnxruntime."""
    out = []
    keys = sorted({(r["cls"], r["threads"]) for r in rows if r["status"] == "ok"},
                  key=lambda k: (_cls_order(k[0]), k[1]))
    for cls, t in keys:
        ok = [r for r in rows if r["status"] == "ok" and r["cls"] == cls and r["threads"] == t]
        x = [r["x_roofline"] for r in ok]
        vs = [r["vs_ort"] for r in ok if "vs_ort" in r]
        worst = max(ok, key=lambda r: r["x_roofline"])
        s = {"cls": cls, "threads": t, "n": len(ok), "worst": max(x),
             "median": float(np.median(x)), "within": sum(v <= TARGET for v in x),
             "failed": sum(1 for r in rows if r["cls"] == cls and r["status"] != "ok"),
             "vs_ort_geomean": float(np.exp(np.mean(np.log(vs)))) if vs else None,
             "worst_workload": worst["workload"]}
        xn = [r["x_roofline_now"] for r in ok if "x_roofline_now" in r]
        if xn:
            s.update(worst_now=max(xn), within_now=sum(v <= TARGET for v in xn))
        xc = [r["x_roofline_cache"] for r in ok if "x_roofline_cache" in r]
        if xc:
            s.update(worst_cache=max(xc), median_cache=float(np.median(xc)),
                     within_cache=sum(v <= TARGET for v in xc))
        out.append(s)
    return out


def _cls_order(cls: str) -> int:
    return grid.CLASSES.index(cls) if cls in grid.CLASSES else len(grid.CLASSES)


def write_markdown(path: str, summary: list[dict], rows: list[dict], meta: dict) -> None:
    """The per-class table for the README, then the ten workloads farthest from the roof."""
    lines = [f"Roofline: peak {meta['peak']}; DRAM bandwidth {meta['bandwidth']}; "
             f"cache-level bandwidth (traffic:GB/s) {meta['cache_bandwidth']}; "
             f"load average {meta['load_before']:.2f} -> {meta['load_after']:.2f}.", "",
             "| class | threads | workloads | worst x roof | median x roof | within 2x | "
             "worst x roof now | within 2x (now) | "
             "worst x cache roof | within 2x (cache) | nnvm / ort (geomean) | worst workload |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        vs = f"{s['vs_ort_geomean']:.2f}x" if s["vs_ort_geomean"] is not None else "-"
        cache = (f"{s['worst_cache']:.1f}x | {s['within_cache']}/{s['n']}"
                 if "worst_cache" in s else "- | -")
        now = (f"{s['worst_now']:.1f}x | {s['within_now']}/{s['n']}"
               if "worst_now" in s else "- | -")
        lines.append(f"| {s['cls']} | {s['threads']} | {s['n']} | {s['worst']:.1f}x | "
                     f"{s['median']:.1f}x | {s['within']}/{s['n']} | {now} | {cache} | {vs} | "
                     f"`{s['worst_workload']}` |")
    lines += ["", "Farthest from both roofs (each workload at its worse thread count):", "",
              "| worst | threads | x roof | x cache roof | ms | GFLOP/s | attainable | bound "
              "| nnvm / ort | workload |", "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(worst_rows(rows, 10), 1):
        vs = f"{r['vs_ort']:.2f}x" if "vs_ort" in r else "-"
        cache = f"{r['x_roofline_cache']:.1f}x" if "x_roofline_cache" in r else "-"
        lines.append(f"| {i} | {r['threads']} | {r['x_roofline']:.1f}x | {cache} | "
                     f"{r['nnvm_ms']:.3f} | "
                     f"{r['achieved_gflops']:.1f} | {r['attainable_gflops']:.1f} | {r['bound']} "
                     f"| {vs} | `{r['cls']}: {r['workload']}` |")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _far(r: dict) -> float:
    return min(r["x_roofline"], r.get("x_roofline_cache", r["x_roofline"]))


def worst_rows(rows: list[dict], n: int) -> list[dict]:
    """The ``n`` workloads farthest from *both* roofs (far from the DRAM roof only is a
    kernel of a few bytes, at the cost of one call; far from the cache roof only is one that
    streams from cache slower than it could, yet beats DRAM), each at its worse thread
    count: the targets for schedule work."""
    worst: dict[str, dict] = {}
    for r in rows:
        k = r["cls"] + r["workload"]
        if r["status"] == "ok" and (k not in worst or _far(r) > _far(worst[k])):
            worst[k] = r
    return sorted(worst.values(), key=lambda r: -_far(r))[:n]


def _row_line(r: dict) -> str:
    """One workload at one thread count; * marks a memory-bound roof."""
    if r["status"] != "ok":
        return f"{r['cls']:<17} {r['status']}  {r['workload']}"
    ort = f"{r['ort_ms']:>9.4f} {r['vs_ort']:>6.2f}" if "ort_ms" in r else f"{'-':>9} {'-':>6}"
    fb = f" [{r['fallbacks']} fallback]" if r["fallbacks"] else ""
    mem = "*" if r["bound"] == "memory" else " "
    cache = f"{r['x_roofline_cache']:>7.2f}" if "x_roofline_cache" in r else f"{'-':>7}"
    now = f"{r['x_roofline_now']:>6.2f}" if "x_roofline_now" in r else f"{'-':>6}"
    return (f"{r['cls']:<17} {r['threads']:>2} {r['flops'] / 1e6:>9.2f} {r['bytes'] / 1e6:>8.3f} "
            f"{r['ai']:>6.2f} {r['nnvm_ms']:>9.4f} {ort} {r['achieved_gflops']:>8.2f} "
            f"{r['attainable_gflops']:>8.2f} {r['x_roofline']:>6.2f}{mem} {now} {cache}  "
            f"{r['workload']}{fb}")


def sweep(workloads: list[dict], threads: list[int], blocks: int = 5, seconds: float = 0.05,
          with_ort: bool = True, log=print, stream_bytes: int = measure.STREAM_BYTES,
          cache_traffic=measure.CACHE_TRAFFIC, peak_matmul: int = measure.PEAK_MATMUL,
          dram_probe: bool = True) -> dict:
    """Measure every workload at every thread count; the JSON document of the run
    (``stream_bytes``, ``cache_traffic``, ``peak_matmul``: sizes of the bandwidth streams
    and of the peak-measuring MatMul; smaller in tests; ``dram_probe``: time the DRAM stream
    beside every workload for the "x roof now" column)."""
    from nnvm.runtime.profiler import cpu_peak_gflops

    load0 = os.getloadavg()[0]
    nominal, hows = {}, []
    for t in threads:
        nominal[t], how = cpu_peak_gflops(t)
        hows.append(f"nominal {nominal[t]:.0f} GFLOP/s = {how}")
    peaks, peak_how = measure.compute_peak(threads, nominal, peak_matmul)
    for lo, hi in zip(sorted(threads), sorted(threads)[1:]):
        peaks[hi] = max(peaks[hi], peaks[lo])  # as for bandwidth below: noise, not the roof
    hows.append("roof " + ", ".join(f"{peaks[t]:.0f} at {t}t" for t in threads)
                + f" (measured {peak_how})")
    bws, bw_how = measure.bandwidth(threads, stream_bytes)
    curves = measure.cache_bandwidth(threads, cache_traffic) if cache_traffic else None
    for t in curves or ():  # a stream 8x a 32 MiB last-level cache measures DRAM as well
        bws[t] = max([bws[t]] + [g for n, g in curves[t] if n >= 256 << 20])
    for lo, hi in zip(sorted(threads), sorted(threads)[1:]):
        # more threads can always leave one idle: a lower figure is the shared machine's noise
        bws[hi] = max(bws[hi], bws[lo])
        if curves:
            curves[hi] = [(n, max(a, b)) for (n, a), (_, b) in zip(curves[hi], curves[lo])]
    bw_text = ", ".join(f"{bws[t]:.1f} GB/s at {t}t" for t in threads) + f" ({bw_how})"
    cache_text = "; ".join(f"{t}t " + " ".join(f"{_size(n)}:{g:.0f}" for n, g in curves[t])
                           for t in threads) if curves else "-"
    probe = measure.DramProbe(stream_bytes) if dram_probe else None
    log(f"peak {'; '.join(hows)}")
    log(f"DRAM bandwidth {bw_text}; load average {load0:.2f}; {len(workloads)} workloads")
    log(f"cache-level bandwidth, traffic:GB/s {cache_text}")
    log(f"{'class':<17} {'t':>2} {'MFLOP':>9} {'MB':>8} {'AI':>6} {'nnvm ms':>9} {'ort ms':>9} "
        f"{'/ort':>6} {'GFLOP/s':>8} {'attain':>8} {'x roof':>7} {'x now':>6} {'x cache':>7}  "
        "workload")
    rows = []
    for w in workloads:
        for r in measure_workload(w, threads, peaks, bws, blocks, seconds, with_ort, curves,
                                  probe):
            rows.append(r)
            log(_row_line(r))
    meta = {"peak": "; ".join(hows), "peak_gflops": peaks, "bandwidth_gbs": bws,
            "bandwidth": bw_text, "cache_bandwidth": cache_text,
            "cache_curves": curves, "load_before": load0, "load_after": os.getloadavg()[0],
            "threads": threads, "target": TARGET}
    return {"meta": meta, "summary": summarise(rows), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--classes", default=None, help=f"comma list of {', '.join(grid.CLASSES)}")
    ap.add_argument("--max-per-class", type=int, default=12)
    ap.add_argument("--threads", default="1,2", help="thread counts, e.g. 1 or 1,2")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=0.05, help="length of one block")
    ap.add_argument("--no-ort", action="store_true", help="do not time onnxruntime")
    ap.add_argument("--no-dram-probe", action="store_true",
                    help="do not time the DRAM stream beside each workload (no \"x now\")")
    ap.add_argument("--no-extras", action="store_true",
                    help="corpus shapes only (no LRN/GRU/AlexNet shapes of roofline.grid.EXTRAS)")
    ap.add_argument("--grid", default=None,
                    help="cached workload grid (default: roofline_grid.json beside --json, "
                         "else in the corpus cache folder)")
    ap.add_argument("--refresh-grid", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None, metavar="OUT.md")
    args = ap.parse_args(argv)
    classes = args.classes.split(",") if args.classes else None
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    if args.grid:
        grid_path = Path(args.grid)
    elif args.json:
        grid_path = Path(args.json).resolve().parent / "roofline_grid.json"
    else:
        grid_path = grid.corpus.cache_dir() / "roofline_grid.json"
    workloads = grid.load_or_extract(grid_path, args.refresh_grid)
    if not args.no_extras:
        have = {grid.key(w) for w in workloads}
        workloads = workloads + [w for w in grid.EXTRAS if grid.key(w) not in have]
    chosen = grid.select(workloads, classes, args.max_per_class)
    print(f"grid {grid_path}: {len(workloads)} distinct workloads, {len(chosen)} swept")
    result = sweep(chosen, threads, args.blocks, args.min_seconds, not args.no_ort,
                   dram_probe=not args.no_dram_probe)
    print()
    print(f"{'class':<17} {'t':>2} {'n':>3} {'worst':>7} {'median':>7} {'<=2x':>6} "
          f"{'now':>7} {'<=2x':>6} {'cache':>7} {'<=2x':>6} {'/ort':>6}  worst workload")
    for s in result["summary"]:
        vs = f"{s['vs_ort_geomean']:>6.2f}" if s["vs_ort_geomean"] is not None else f"{'-':>6}"
        cache = (f"{s['worst_cache']:>6.2f}x {s['within_cache']:>3}/{s['n']:<2}"
                 if "worst_cache" in s else f"{'-':>7} {'-':>6}")
        now = (f"{s['worst_now']:>6.2f}x {s['within_now']:>3}/{s['n']:<2}"
               if "worst_now" in s else f"{'-':>7} {'-':>6}")
        print(f"{s['cls']:<17} {s['threads']:>2} {s['n']:>3} {s['worst']:>6.2f}x "
              f"{s['median']:>6.2f}x {s['within']:>3}/{s['n']:<2} {now} {cache} {vs}  "
              f"{s['worst_workload']}")
    print("\nfarthest from both roofs (x roof / x cache, threads):")
    for r in worst_rows(result["rows"], 10):
        print(f"  {r['x_roofline']:>7.1f}x {r.get('x_roofline_cache', 0):>7.1f}x "
              f"{r['threads']}t  {r['cls']}: {r['workload']}")
    print(f"load average {result['meta']['load_before']:.2f} -> "
          f"{result['meta']['load_after']:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    if args.markdown:
        write_markdown(args.markdown, result["summary"], result["rows"], result["meta"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
