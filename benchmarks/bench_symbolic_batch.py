"""What a symbolic batch costs: one build split into bucket runs vs one build per batch size.

Issue 17 asks that a model built with a symbolic batch run any batch size without
recompiling. ``nnvm.InferenceSession`` compiles such a model once, for ``batch_bucket``
samples, and splits a fed batch into runs of that size (``nnvm.runtime.batching``). This
prints, per model and target: the build time of the symbolic-batch session (bucket 1 and
bucket 8) and of one fixed-shape build, then the median latency of ``run`` at each batch
size for the bucket-1 session, the bucket-8 session, a module compiled for exactly that batch
size (what recompiling would buy), and onnxruntime on the same ONNX bytes, timed
interleaved in rotating order so a noisy machine slows all alike.

    python benchmarks/bench_symbolic_batch.py [--target llvm] [--batches 1,3,8,32]
                                              [--repeat 30] [--threads 1] [MODEL.onnx ...]

Models: the bundled ``examples/models/digits_mlp.onnx`` and any ``.onnx`` given whose
inputs share one symbolic batch dimension (e.g. a corpus model from
``benchmarks/corpus/fetch.py``: mtcnn-onet, openwakeword-embedding). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DIGITS = HERE.parent / "examples" / "models" / "digits_mlp.onnx"


def _feed(sess, n: int) -> dict:
    rng = np.random.default_rng(n)
    feed = {}
    for a in sess.get_inputs():
        shape = tuple(n if isinstance(d, str) else d for d in a.shape)
        feed[a.name] = rng.standard_normal(shape).astype(a.dtype) \
            if a.dtype.startswith("float") else np.zeros(shape, a.dtype)
    return feed


def _timed_build(make):
    t0 = time.perf_counter()
    value = make()
    return value, time.perf_counter() - t0


def bench(path: str, target: str, batches: list[int], repeat: int, threads: int) -> None:
    import onnxruntime as ort

    import nnvm

    data = Path(path).read_bytes()
    cache = tempfile.mkdtemp(prefix="nnvm-bench-batch-")  # cold: builds are really timed
    b1, t_b1 = _timed_build(lambda: nnvm.InferenceSession(data, target, cache_dir=cache))
    if b1.builds != 1 or not hasattr(b1._fixed, "bucket"):
        print(f"{Path(path).name}: the batch cannot be split here; skipped")
        return
    b8, t_b8 = _timed_build(lambda: nnvm.InferenceSession(data, target, cache_dir=cache,
                                                           batch_bucket=8))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    ref = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    name = b1.get_inputs()[0].name
    fixed = {}
    t_fixed = 0.0
    for n in batches:
        shape = {a.name: tuple(n if isinstance(d, str) else d for d in a.shape)
                 for a in b1.get_inputs()}
        fixed[n], t = _timed_build(lambda: nnvm.InferenceSession(
            data, target, shape=shape, cache_dir=False))
        t_fixed = max(t_fixed, t)
    print(f"\n{Path(path).name} on {target} ({threads} thread(s)); input '{name}'")
    print(f"build: symbolic bucket 1 {t_b1:.2f} s, bucket 8 {t_b8:.2f} s, one fixed batch "
          f"up to {t_fixed:.2f} s (per batch size)")
    print(f"{'batch':>6} {'bucket 1 ms':>12} {'bucket 8 ms':>12} {'fixed ms':>10} "
          f"{'onnxruntime ms':>15}  b1/fixed")
    for n in batches:
        feed = _feed(b1, n)
        runs = {"b1": lambda: b1.run(None, feed), "b8": lambda: b8.run(None, feed),
                "fixed": lambda: fixed[n].run(None, feed), "ort": lambda: ref.run(None, feed)}
        times: dict[str, list[float]] = {k: [] for k in runs}
        for fn in runs.values():
            fn()  # warm up
        for r in range(repeat):
            order = list(runs)[r % 4:] + list(runs)[:r % 4]
            for k in order:
                t0 = time.perf_counter()
                runs[k]()
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"{n:>6} {med['b1']:>12.3f} {med['b8']:>12.3f} {med['fixed']:>10.3f} "
              f"{med['ort']:>15.3f}  {med['b1'] / med['fixed']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=[str(DIGITS)])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--batches", default="1,3,8,32")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    print(f"load average before: {os.getloadavg()}")
    for path in args.models:
        bench(path, args.target, [int(b) for b in args.batches.split(",")], args.repeat,
              args.threads)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
