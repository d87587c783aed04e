"""The llvm target against onnxruntime on the four model families of issue 5, one process.

Every model is an export-style ONNX graph built in code (``onnx_zoo``): a YOLOv8n-class
detector at 320x320, a MobileNetV3-backbone text detector at 640x640, a 6-layer BERT
encoder at 128 tokens and one step of an LSTM voice-activity model. Each is imported with
``nnvm.frontend.from_onnx``, compiled for ``llvm`` at opt_level 3 (cold: empty kernel cache;
warm: the same build again), and run next to onnxruntime on the *same* ``.onnx`` bytes at
each thread count. Timings interleave the two runtimes in blocks of calls of about 50 ms
(``--repeat`` pairs of blocks, the median per call of each), so a noisy machine slows both
alike; the load average is printed.

    python benchmarks/bench_llvm.py [--models yolo,ocr,bert,vad] [--threads 1,2]
                                    [--repeat 30] [--min-seconds 2]

Columns: nnvm and ORT median ms per ``run`` (inputs copied in, outputs copied out, as
``InferenceSession.run`` does), their ratio (< 1: nnvm faster), the max abs difference of
the outputs, nnvm's planned activation bytes and the executor's allocated bytes, ORT's
resident-memory growth over session creation and first run (weights + arena), and the
compile times. The last line is the geometric mean of the ratios per thread count.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

import nnvm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_zoo import MODELS  # noqa: E402


def _rss() -> int:
    """Current resident bytes of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _build(model, feed):
    t0 = time.perf_counter()
    graph, params = nnvm.frontend.from_onnx(model, shape={k: v.shape for k, v in feed.items()})
    t_import = time.perf_counter() - t0
    names = graph.index.input_names
    t0 = time.perf_counter()
    lib = nnvm.compiler.build(graph, target="llvm", opt_level=3, params=params,
                              shape={k: v.shape for k, v in feed.items() if k in names},
                              dtype={k: v.dtype.name for k, v in feed.items() if k in names})
    return lib, t_import, time.perf_counter() - t0


def _interleaved(fa, fb, repeat: int, min_seconds: float,
                 block_seconds: float = 0.05) -> tuple[float, float]:
    """Median seconds per call of ``fa`` and ``fb``, timed in alternating blocks of calls
    (each about ``block_seconds``; at least ``repeat`` blocks each and ``min_seconds`` in
    all), after a warm-up of each. Why blocks, not single calls: onnxruntime's workers spin
    after each of its calls, and nnvm's after each of its own, so a call right after the
    other runtime's would share the cores with the other's spinning threads; in blocks only
    the first call of a block does (``corpus/bench.py`` times its runtimes the same way)."""
    for _ in range(3):
        fa()
        fb()

    def block(f) -> float:
        n, t0 = 0, time.perf_counter()
        while True:
            f()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= block_seconds:
                return dt / n
    ta, tb = [], []
    start = time.perf_counter()
    while len(ta) < repeat or (time.perf_counter() - start < min_seconds and len(ta) < 5000):
        for f, acc in ((fa, ta), (fb, tb)) if len(ta) % 2 == 0 else ((fb, tb), (fa, ta)):
            acc.append(block(f))
    return float(np.median(ta)), float(np.median(tb))


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--min-seconds", type=float, default=2.0)
    ap.add_argument("--keep-cache", action="store_true",
                    help="use NNVM_CACHE_DIR as is (default: a fresh one, so 'cold' is cold)")
    args = ap.parse_args()
    if not args.keep_cache:
        os.environ["NNVM_CACHE_DIR"] = tempfile.mkdtemp(prefix="nnvm-bench-cache-")
    threads = [int(t) for t in args.threads.split(",")]
    rng = np.random.default_rng(0)
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"onnxruntime {ort.__version__}; cpus {os.cpu_count()}")
    head = (f"{'model':<5} {'thr':>3} {'nnvm ms':>9} {'ort ms':>9} {'ratio':>6} {'max err':>8} "
            f"{'act MiB':>7} {'exec MiB':>8} {'ort MiB':>7} {'cold s':>6} {'warm s':>6} "
            f"{'kern':>4} {'fallback'}")
    print(head)
    ratios: dict[int, list[float]] = {t: [] for t in threads}
    for name in args.models.split(","):
        model, feed = MODELS[name](rng)
        onnx_bytes = model.SerializeToString()
        lib, t_import, t_cold = _build(model, feed)
        _, _, t_warm = _build(model, feed)
        stats = lib.stats()
        nnvm_feed = {k: v for k, v in feed.items() if k in lib.input_names}
        for nthr in threads:
            so = ort.SessionOptions()
            so.intra_op_num_threads = nthr
            so.inter_op_num_threads = 1
            rss0 = _rss()
            sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
            theirs = sess.run(None, feed)
            ort_bytes = _rss() - rss0
            lib.set_num_threads(nthr)
            ours = lib.run(**nnvm_feed)
            err = max(float(np.abs(np.asarray(a, np.float64) - b).max())
                      for a, b in zip(ours, theirs))
            t_nnvm, t_ort = _interleaved(lambda: lib.run(**nnvm_feed),
                                         lambda: sess.run(None, feed),
                                         args.repeat, args.min_seconds)
            ratio = t_nnvm / t_ort
            ratios[nthr].append(ratio)
            print(f"{name:<5} {nthr:>3} {t_nnvm * 1e3:>9.3f} {t_ort * 1e3:>9.3f} {ratio:>6.2f} "
                  f"{err:>8.1e} {_mib(stats['activation_bytes']):>7} "
                  f"{_mib(stats['executor_bytes']):>8} {_mib(ort_bytes):>7} {t_cold:>6.1f} "
                  f"{t_warm:>6.2f} {stats['num_kernels']:>4} "
                  f"{','.join(stats['fallback_ops']) or '-'}", flush=True)
            del sess
    for nthr in threads:
        r = ratios[nthr]
        if r:
            print(f"geomean nnvm/ort at {nthr} thread(s): {float(np.exp(np.mean(np.log(r)))):.2f}"
                  f" over {len(r)} models")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
