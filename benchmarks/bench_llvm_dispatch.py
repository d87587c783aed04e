"""What ``lib.run`` costs on top of its kernels on ``llvm``: the Python loop vs the C executor.

Issue 19 asks that Python ``lib.run`` overhead per kernel on llvm be at most 3 us. Each model
is built once per executor (``NNVM_LLVM_EXECUTOR=python``: one FFI call per kernel from a
Python loop, the executor before issue 19; ``c``: one call into the C executor per run) and
timed next to onnxruntime on the *same* ONNX bytes, interleaved block by block (a block is
``--inner`` back-to-back runs, each timed alone; the median of the block medians over
``--repeat`` rounds, in rotating order),
so a noisy machine slows all three alike. The load average is printed before and after.

    python benchmarks/bench_llvm_dispatch.py [--chain 8,32,128] [--repeat 200] [--inner 20]
                                             [--threads 1] [--no-corpus]

Models: a chain of N tiny MatMuls (1x16 @ 16x16: N kernels that each take ~0.1 us), the LSTM
VAD step of ``onnx_zoo.py``, and, where ``benchmarks/corpus/fetch.py`` already put them in
``$NNVM_CORPUS_DIR``, real streaming step models from PyPI wheels (silero VAD, openWakeWord).
Nothing is downloaded here.

Columns: kernels per run; onnxruntime, python-loop and C-executor microseconds per ``run``
(inputs copied in, outputs copied out, as ``InferenceSession.run`` does); the kernels alone
(``lib.benchmark()`` of the C build: the steps in C with no copies, i.e. the sum of kernel
times plus one FFI call); and the overhead per kernel, ``(run - kernels) / kernels``, before
(python) and after (c).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "corpus"))

CORPUS_STEPS = ["silero-vad-16k-op15", "silero-vad-op18-ifless", "openwakeword-hey-jarvis",
                "openwakeword-embedding", "openwakeword-melspectrogram"]


def chain_model(n: int, width: int = 16):
    """An ONNX chain of ``n`` MatMuls (no fusion possible between them): n tiny kernels."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(n)
    nodes, inits, x = [], [], "x"
    for i in range(n):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        out = "y" if i == n - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [out]))
        x = out
    graph = helper.make_graph(nodes, f"chain{n}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime reads (onnx writes newer IR versions)
    return model, {"x": rng.standard_normal((1, width)).astype(np.float32)}


def _models(args):
    import onnx_zoo

    out = [(f"chain-{n}", *chain_model(n)) for n in args.chain]
    out.append(("vad-step (onnx_zoo)", *onnx_zoo.vad_model(np.random.default_rng(0))))
    if args.no_corpus:
        return out
    import onnx

    import corpus

    entries = {e["id"]: e for e in corpus.models()}
    for mid in CORPUS_STEPS:
        path = corpus.model_path(entries[mid])
        if not path.exists():
            print(f"# {mid}: not in {corpus.cache_dir()} (run benchmarks/corpus/fetch.py)")
            continue
        out.append((mid, onnx.load(str(path)), corpus.make_inputs(entries[mid])))
    return out


def _build(model, feed, executor: str, threads: int):
    import nnvm

    os.environ["NNVM_LLVM_EXECUTOR"] = executor
    try:
        graph, params = nnvm.frontend.from_onnx(model, shape={k: np.shape(v)
                                                              for k, v in feed.items()})
        names = set(graph.index.input_names)
        lib = nnvm.compiler.build(graph, target="llvm", params=params,
                                  shape={k: np.shape(v) for k, v in feed.items() if k in names},
                                  dtype={k: np.asarray(v).dtype.name for k, v in feed.items()
                                         if k in names})
    finally:
        del os.environ["NNVM_LLVM_EXECUTOR"]
    lib.set_num_threads(threads)
    assert lib.stats()["executor"].startswith(executor), lib.stats()["executor"]
    return lib


def _block(fn, inner: int):
    """A block of ``inner`` back-to-back calls of ``fn``: the median microseconds of one call
    (each timed alone, as ``lib.benchmark`` times the kernels; the first call of a block may
    find its weights evicted from the caches by the other runtimes)."""
    def timed():
        times = []
        for _ in range(inner):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return float(np.median(times)) * 1e6
    return timed


def _time_blocks(blocks: dict, repeat: int) -> dict:
    """Median microseconds per call of each block, interleaved in rotating order."""
    names = list(blocks)
    times = {n: [] for n in names}
    for r in range(repeat):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n].append(blocks[n]())
    return {n: float(np.median(v)) for n, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chain", default="8,32,128",
                    type=lambda s: [int(x) for x in s.split(",") if x])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-corpus", action="store_true", help="skip the corpus step models")
    args = ap.parse_args(argv)
    import onnxruntime as ort

    print(f"# load average before: {os.getloadavg()}; threads {args.threads}")
    print(f"{'model':30s} {'kernels':>7s} {'ort us':>8s} {'python us':>9s} {'c us':>8s} "
          f"{'kernels us':>10s} {'ovh/k py':>8s} {'ovh/k c':>8s} {'c/ort':>6s}")
    for name, model, feed in _models(args):
        py = _build(model, feed, "python", args.threads)
        c = _build(model, feed, "c", args.threads)
        feed = {k: v for k, v in feed.items() if k in c.input_names}
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        ort_feed = {i.name: feed[i.name] for i in sess.get_inputs() if i.name in feed}
        for a, b in zip(py.run(**feed), c.run(**feed)):
            assert np.array_equal(a, b), f"{name}: python loop and C executor disagree"
        kernels = c.stats()["num_kernels"]
        t = _time_blocks({"ort": _block(lambda: sess.run(None, ort_feed), args.inner),
                          "python": _block(lambda: py.run(**feed), args.inner),
                          "c": _block(lambda: c.run(**feed), args.inner),
                          # each run timed alone, median of the block (no copies, no Python)
                          "kernels": lambda: c.benchmark(repeat=args.inner, warmup=0) * 1e6},
                         args.repeat)
        k = max(kernels, 1)
        print(f"{name:30s} {kernels:7d} {t['ort']:8.2f} {t['python']:9.2f} {t['c']:8.2f} "
              f"{t['kernels']:10.2f} {(t['python'] - t['kernels']) / k:8.2f} "
              f"{(t['c'] - t['kernels']) / k:8.2f} {t['c'] / t['ort']:6.2f}", flush=True)
    print(f"# load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
