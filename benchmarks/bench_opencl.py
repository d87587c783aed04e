"""Latency of the opencl target (a CPU OpenCL driver here) against onnxruntime and llvm.

Issue 6's model families, each built twice from the same weights: as an ONNX graph
(onnx.helper) for onnxruntime and as an nnvm symbol: ``mlp`` (4 x dense 1024 + tanh, batch
64), ``conv`` (4 residual conv3x3 blocks, 32 channels, 56x56) and ``cnn`` (a small image
classifier: conv-relu-pool x2, depthwise conv, global pool, dense, softmax); and, by default,
the llvm issue's families, the export-style ONNX models of ``benchmarks/onnx_zoo.py`` (YOLO,
MobileNetV3 text detector, BERT encoder, LSTM VAD step) through ``nnvm.frontend.from_onnx``.
The runtimes are timed in alternating blocks of calls (the median of each), so a noisy
machine slows them alike. The CPU drivers (PoCL, Intel's runtime) run on every core, so
onnxruntime and llvm get the same thread count. The device is the default one (``nnvm
plugins`` shows it); ``--device`` picks another (as ``NNVM_OPENCL_DEVICE`` does). Prints median latencies, ratios, compile time (cold when the kernel caches are
empty), max error, kernel/fallback counts, the geometric mean of the ratios and peak RSS.

    python benchmarks/bench_opencl.py [--repeat 30] [--models mlp,conv,cnn]
                                      [--zoo yolo,ocr,bert,vad] [--threads 2] [--no-llvm]
                                      [--device intel|portable|INDEX]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import nnvm
import nnvm.symbol as sym


def _init(name, arr):
    return numpy_helper.from_array(arr.astype(np.float32), name)


def model_mlp(rng, batch=64, width=1024, layers=4):
    """Dense + tanh layers: ORT Gemm(transB) vs nnvm dense."""
    x = sym.Variable("x")
    y, nodes, inits, params, prev = x, [], [], {}, "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        b = rng.standard_normal(width).astype(np.float32) * 0.1
        params[f"fc{i}_weight"], params[f"fc{i}_bias"] = w, b
        y = sym.tanh(sym.dense(y, units=width, name=f"fc{i}"))
        inits += [_init(f"w{i}", w), _init(f"b{i}", b)]
        nodes += [helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"g{i}"], transB=1),
                  helper.make_node("Tanh", [f"g{i}"], [f"t{i}"])]
        prev = f"t{i}"
    shape = (batch, width)
    return y, params, _onnx(nodes, inits, shape, (batch, width), prev), shape


def model_conv(rng, channels=32, size=56, blocks=4):
    """Residual blocks: conv3x3 + bias + relu + add (fused into one kernel by FuseOps)."""
    x = sym.Variable("x")
    y, nodes, inits, params, prev = x, [], [], {}, "x"
    for i in range(blocks):
        w = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)
             ).astype(np.float32)
        b = rng.standard_normal(channels).astype(np.float32) * 0.1
        params[f"c{i}_weight"], params[f"c{i}_bias"] = w, b
        y = sym.relu(sym.conv2d(y, channels=channels, kernel_size=(3, 3), padding=(1, 1),
                                name=f"c{i}")) + y
        inits += [_init(f"w{i}", w), _init(f"b{i}", b)]
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"],
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
                  helper.make_node("Add", [f"r{i}", prev], [f"a{i}"])]
        prev = f"a{i}"
    shape = (1, channels, size, size)
    return y, params, _onnx(nodes, inits, shape, shape, prev), shape


def model_cnn(rng):
    """A small image classifier: conv-relu-pool x2, depthwise, global pool, dense, softmax."""
    x = sym.Variable("x")
    y, nodes, inits, params, prev = x, [], [], {}, "x"
    for name, cin, cout in [("c0", 3, 32), ("c1", 32, 64)]:
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32) * 0.1
        params[f"{name}_weight"], params[f"{name}_bias"] = w, b
        y = sym.max_pool2d(sym.relu(sym.conv2d(y, channels=cout, kernel_size=(3, 3),
                                               padding=(1, 1), name=name)),
                           pool_size=(2, 2), strides=(2, 2))
        inits += [_init(f"{name}w", w), _init(f"{name}b", b)]
        nodes += [helper.make_node("Conv", [prev, f"{name}w", f"{name}b"], [f"{name}o"],
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"{name}o"], [f"{name}r"]),
                  helper.make_node("MaxPool", [f"{name}r"], [f"{name}p"], kernel_shape=[2, 2],
                                   strides=[2, 2])]
        prev = f"{name}p"
    wd = (rng.standard_normal((64, 1, 3, 3)) / 3).astype(np.float32)
    params["dw_weight"] = wd
    y = sym.relu(sym.conv2d(y, channels=64, kernel_size=(3, 3), padding=(1, 1), groups=64,
                            use_bias=False, name="dw"))
    inits.append(_init("dww", wd))
    nodes += [helper.make_node("Conv", [prev, "dww"], ["dwo"], kernel_shape=[3, 3],
                               pads=[1, 1, 1, 1], group=64),
              helper.make_node("Relu", ["dwo"], ["dwr"]),
              helper.make_node("GlobalAveragePool", ["dwr"], ["gp"]),
              helper.make_node("Flatten", ["gp"], ["fl"])]
    wf = (rng.standard_normal((10, 64)) / 8).astype(np.float32)
    bf = rng.standard_normal(10).astype(np.float32)
    params["fc_weight"], params["fc_bias"] = wf, bf
    y = sym.softmax(sym.dense(sym.flatten(sym.global_avg_pool2d(y)), units=10, name="fc"))
    inits += [_init("fcw", wf), _init("fcb", bf)]
    nodes += [helper.make_node("Gemm", ["fl", "fcw", "fcb"], ["fco"], transB=1),
              helper.make_node("Softmax", ["fco"], ["out"], axis=-1)]
    shape = (1, 3, 64, 64)
    return y, params, _onnx(nodes, inits, shape, (1, 10), "out"), shape


def _onnx(nodes, inits, in_shape, out_shape, out_name):
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


MODELS = {"mlp": model_mlp, "conv": model_conv, "cnn": model_cnn}


def _interleaved(fns, repeat: int, block: int = 5) -> list[float]:
    """Median seconds of each function, timed in alternating blocks of ``block`` calls (the
    first call of a block is not counted): alternation spreads machine noise over all of
    them, and blocks keep one runtime's spinning worker threads (onnxruntime and the llvm
    thread pool spin for a while after a call) from stealing the cores of the next."""
    times = [[] for _ in fns]
    while min(len(t) for t in times) < repeat:
        for f, acc in zip(fns, times):
            f()
            for _ in range(block):
                t0 = time.perf_counter()
                f()
                acc.append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def _llvm_reason() -> str | None:
    try:
        return nnvm.backend.get_backend("llvm", require_available=False).is_available()
    except nnvm.errors.NNVMError as exc:
        return str(exc)


def _build(graph, target, feed, params, level, threads):
    names = set(graph.index.input_names) if hasattr(graph, "index") else set(feed)
    lib = nnvm.compiler.build(graph, target=target, params=params, opt_level=level,
                              shape={k: v.shape for k, v in feed.items() if k in names},
                              dtype={k: v.dtype.name for k, v in feed.items() if k in names})
    if hasattr(lib, "set_num_threads"):
        lib.set_num_threads(threads)
    return lib


def _cases(args, rng):
    for name in [m for m in args.models.split(",") if m]:
        y, params, onnx_bytes, shape = MODELS[name](rng)
        yield name, y, params, onnx_bytes, {"x": rng.standard_normal(shape).astype(np.float32)}
    if args.zoo:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from onnx_zoo import MODELS as ZOO

        for name in args.zoo.split(","):
            model, feed = ZOO[name](rng)
            graph, params = nnvm.frontend.from_onnx(
                model, shape={k: v.shape for k, v in feed.items()})
            yield name, graph, params, model.SerializeToString(), feed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--zoo", default="yolo,ocr,bert,vad",
                    help="onnx_zoo models ('' for none)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--no-llvm", action="store_true")
    ap.add_argument("--device", default=None,
                    help="OpenCL device: a substring of 'platform / device' or an index")
    args = ap.parse_args()
    if args.device:
        os.environ["NNVM_OPENCL_DEVICE"] = args.device
    from nnvm_opencl import device as devices

    print(f"opencl device: {devices.name(devices.select())}")
    rng = np.random.default_rng(0)
    why = "skipped" if args.no_llvm else _llvm_reason()
    print(f"load average {os.getloadavg()[0]:.2f}; threads {args.threads}")
    print(f"{'model':<8} {'opencl ms':>10} {'ort ms':>9} {'ocl/ort':>8} {'llvm ms':>9} "
          f"{'ocl/llvm':>8} {'compile s':>9} {'max err':>9}")
    ratios = []
    for name, graph, params, onnx_bytes, feed in _cases(args, rng):
        t0 = time.perf_counter()
        lib = _build(graph, "opencl", feed, params, args.opt_level, args.threads)
        ins = {k: v for k, v in feed.items() if k in lib.input_names}
        lib.run(**ins)
        compile_s = time.perf_counter() - t0
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
        err = float(np.abs(lib.run(**ins)[0] - sess.run(None, feed)[0]).max())
        fns = [lambda: lib.run(**ins), lambda: sess.run(None, feed)]
        if why is None:
            llvm = _build(graph, "llvm", feed, params, args.opt_level, args.threads)
            fns.append(lambda: llvm.run(**ins))
        t = _interleaved(fns, args.repeat)
        ratios.append(t[0] / t[1])
        llvm_cols = (f"{t[2] * 1e3:>9.3f} {t[0] / t[2]:>8.2f}" if len(t) > 2 else
                     f"{'n/a':>9} {'n/a':>8}")
        print(f"{name:<8} {t[0] * 1e3:>10.3f} {t[1] * 1e3:>9.3f} {t[0] / t[1]:>8.2f} "
              f"{llvm_cols} {compile_s:>9.2f} {err:>9.1e}", flush=True)
        s = lib.stats()
        print(f"{'':<8} kernels={s['num_kernels']} fallbacks={s['num_fallback_ops']} "
              f"arena={s['arena_bytes']} activation_bytes={s['activation_bytes']} "
              f"(naive {s['activation_bytes_naive']})" + (f" llvm: {why}" if why else ""))
    if ratios:
        print(f"geomean opencl/onnxruntime {float(np.exp(np.mean(np.log(ratios)))):.2f}x "
              f"over {len(ratios)} models; worst {max(ratios):.2f}x")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
