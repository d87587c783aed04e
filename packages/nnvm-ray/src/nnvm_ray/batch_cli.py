"""``nnvm batch``: a compiled artifact over a folder of ``.npz`` files or a Parquet file, on Ray.

The driver reads and checks every input file (bad ones are reported by name), turns the
good ones into one Ray Dataset of rows tagged with their file and row number, runs
``nnvm_ray.map_batches`` over it, and puts the output rows back together per file. The tags
are what make "every row exactly once" checkable: before anything is written, each file
must have got each of its rows back once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from nnvm import NNVMError
from nnvm.errors import format_error

from .files import InputFile, input_kind, read_inputs, write_npz, write_parquet
from .runner import Signature, read_signature

FILE_COLUMN = "__nnvm_file"
ROW_COLUMN = "__nnvm_row"
WORKER_COLUMN = "__nnvm_worker"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "batch", help="run a .nnvm artifact over a folder of .npz files or a Parquet file "
                      "on Ray",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Batch inference on a Ray cluster: each worker (a Ray actor) loads the "
                    "artifact once and runs rows in chunks of its compiled batch size. "
                    "IN is a folder of .npz files (keys = input names; the leading axis "
                    "holds rows) or a Parquet file with one column per input; OUT gets the "
                    "same form keyed by output names (for a folder: one .npz per input file, "
                    "same stem).",
        epilog="examples:\n  nnvm batch mlp.nnvm --input inputs/ --output outputs/\n"
               "  nnvm batch mlp-cuda.nnvm mlp-llvm.nnvm --input inputs/ --output outputs/\n"
               "  nnvm batch mlp.nnvm --input data.parquet --output preds.parquet "
               "--workers 2\n  nnvm batch mlp.nnvm --input inputs/ --output outputs/ "
               "--ray 10.0.0.5:6379")
    p.add_argument("model", metavar="MODEL.nnvm", nargs="+",
                   help="the compiled artifact; several: the same model compiled for several "
                        "targets, each worker runs the best one its node can run")
    p.add_argument("--input", required=True, metavar="IN", help="folder of .npz or .parquet")
    p.add_argument("--output", required=True, metavar="OUT", help="folder or .parquet")
    p.add_argument("--ray", default="local", metavar="ADDRESS|local",
                   help="cluster address (from 'ray start --head'), 'auto', or 'local' "
                        "(default: start one in this process)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="actors, each loading the artifact once (default: one per CPU)")
    p.add_argument("--cpus-per-worker", type=int, default=1, metavar="C",
                   help="CPUs Ray reserves per actor, also its kernel threads (default 1)")
    p.add_argument("--batch-size", type=int, metavar="B",
                   help="rows per Ray batch (default: a multiple of the compiled batch "
                        "near 256)")
    p.add_argument("--on-error", choices=["skip", "fail"], default="skip",
                   help="a bad input file: report it and run the others (skip, default), "
                        "or stop before running anything (fail)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_batch)


def cmd_batch(args) -> int:
    signature = read_signature(args.model)
    kind = input_kind(args.input)
    _check_output(args.output, kind)
    for name, value in (("--workers", args.workers), ("--batch-size", args.batch_size),
                        ("--cpus-per-worker", args.cpus_per_worker)):
        if value is not None and value < 1:
            raise NNVMError(format_error(name, "must be at least 1", ">= 1", value))
    files = read_inputs(args.input, signature)
    bad = [f for f in files if f.error]
    if bad and args.on_error == "fail":
        raise NNVMError(f"{bad[0].error} (--on-error fail: nothing was run; --on-error skip "
                        f"runs the other files)")
    for f in bad:
        print(f"nnvm batch: skipped {f.error}", file=sys.stderr)
    good = [f for f in files if not f.error]
    if not good:
        raise NNVMError(format_error(f"--input '{args.input}'", "no readable input file",
                                     fix="See the messages above for each file"))

    models = []
    for path in args.model:
        with open(path, "rb") as fh:
            models.append(fh.read())
    cpus = args.workers * args.cpus_per_worker if args.workers else None
    from .cluster import ray_cluster

    with ray_cluster(args.ray, cpus) as cluster_cpus:
        workers = args.workers or max(1, cluster_cpus // args.cpus_per_worker)
        t0 = time.perf_counter()
        batches = _run(good, models, args, workers)
        seconds = time.perf_counter() - t0
    outputs = _regroup(good, batches, signature)
    written = _write(args.output, kind, good, outputs)
    summary = _summary(good, bad, batches, seconds, workers, written)
    print(json.dumps(summary, sort_keys=True) if args.json else _summary_text(summary))
    return 0


def _check_output(path: str, kind: str) -> None:
    if kind == "parquet":
        if not path.lower().endswith((".parquet", ".pq")) or os.path.isdir(path):
            raise NNVMError(format_error("--output", "must be a .parquet file for a Parquet "
                                         "input", "a .parquet path", path))
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise NNVMError(format_error("--output", "its folder does not exist", got=path,
                                         fix="Create the folder first"))
    elif os.path.exists(path) and not os.path.isdir(path):
        raise NNVMError(format_error("--output", "must be a folder for a folder of .npz "
                                     "inputs", "a folder", f"the file '{path}'"))


def _rows_dataset(files: list[InputFile]):
    """One Arrow block per input file: the input columns plus the file and row tags."""
    import pyarrow as pa
    import ray.data
    from ray.data.extensions import ArrowTensorArray

    tables = []
    for i, f in enumerate(files):
        cols = {n: ArrowTensorArray.from_numpy(a) if a.ndim > 1 else pa.array(a)
                for n, a in f.arrays.items()}
        cols[FILE_COLUMN] = pa.array(np.full(f.rows, i, np.int64))
        cols[ROW_COLUMN] = pa.array(np.arange(f.rows, dtype=np.int64))
        tables.append(pa.table(cols))
    return ray.data.from_arrow(tables)


def _run(files: list[InputFile], models: list[bytes], args, workers: int) -> list[dict]:
    """Every output batch, streamed, with a rows/s progress bar on a terminal."""
    from tqdm import tqdm

    from .inference import map_batches

    out = map_batches(_rows_dataset(files), models, batch_size=args.batch_size,
                      concurrency=workers, num_cpus=args.cpus_per_worker,
                      worker_column=WORKER_COLUMN)
    total = sum(f.rows for f in files)
    batches = []
    with tqdm(total=total, unit="row", file=sys.stderr, desc="nnvm batch",
              disable=args.quiet or not sys.stderr.isatty()) as bar:
        for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
            batches.append(batch)
            bar.update(len(batch[ROW_COLUMN]))
    return batches


def _regroup(files: list[InputFile], batches: list[dict], signature: Signature
             ) -> list[dict[str, np.ndarray]]:
    """Output rows put back per file in row order; every row must be there exactly once."""
    cat = {k: np.concatenate([b[k] for b in batches]) if batches else np.empty(0)
           for k in [FILE_COLUMN, ROW_COLUMN, *signature.output_names]}
    order = np.lexsort((cat[ROW_COLUMN], cat[FILE_COLUMN]))
    file_ids, rows = cat[FILE_COLUMN][order], cat[ROW_COLUMN][order]
    want_files = np.repeat(np.arange(len(files)), [f.rows for f in files])
    want_rows = np.concatenate([np.arange(f.rows) for f in files])
    if not (np.array_equal(file_ids, want_files) and np.array_equal(rows, want_rows)):
        raise NNVMError(format_error("nnvm batch", "rows were lost or duplicated",
                                     f"{len(want_rows)} rows, each once", f"{len(rows)} rows",
                                     fix="Please report this with the Ray version"))
    bounds = np.cumsum([0] + [f.rows for f in files])
    return [{n: cat[n][order][a:b] for n in signature.output_names}
            for a, b in zip(bounds[:-1], bounds[1:])]


def _write(out: str, kind: str, files: list[InputFile], outputs: list[dict]) -> list[str]:
    if kind == "parquet":
        return [write_parquet(out, outputs[0])]
    os.makedirs(out, exist_ok=True)
    return [write_npz(out, f.stem, o) for f, o in zip(files, outputs)]


def _summary(good, bad, batches, seconds: float, workers: int, written: list[str]) -> dict:
    rows = sum(f.rows for f in good)
    per_worker: dict[str, int] = {}
    for b in batches:
        for w, n in zip(*np.unique(b[WORKER_COLUMN], return_counts=True)):
            per_worker[str(w)] = per_worker.get(str(w), 0) + int(n)
    return {"files": len(good), "rows": rows, "seconds": round(seconds, 4),
            "rows_per_s": round(rows / seconds, 2) if seconds else None, "workers": workers,
            "per_worker": {w: {"rows": n, "rows_per_s": round(n / seconds, 2)}
                           for w, n in sorted(per_worker.items())},
            "skipped": [f.path for f in bad], "written": len(written)}


def _summary_text(s: dict) -> str:
    lines = [f"nnvm batch: {s['files']} file(s), {s['rows']} rows in {s['seconds']:.2f} s "
             f"({s['rows_per_s']} rows/s) with {s['workers']} worker(s)"]
    lines += [f"  worker {w}: {v['rows']} rows ({v['rows_per_s']} rows/s)"
              for w, v in s["per_worker"].items()]
    lines += [f"  skipped: {p}" for p in s["skipped"]]
    return "\n".join(lines)
