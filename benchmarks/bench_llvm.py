"""Latency of the llvm target against onnxruntime, measured in the same run.

Each model is built twice from the same weights: as an ONNX graph (onnx.helper) for
onnxruntime and as an nnvm symbol for ``nnvm.compiler.build(target="llvm")``. Both run at 1
and 2 threads; the table prints median latencies and nnvm/ORT ratios (below 1 = faster than
ORT), and checks that the outputs agree.

    python benchmarks/bench_llvm.py [--repeat 50] [--models mlp,conv,cnn]
"""

from __future__ import annotations

import argparse
import resource
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
    spec = [("c0", 3, 32, 1), ("c1", 32, 64, 1)]
    y, nodes, inits, params, prev = x, [], [], {}, "x"
    for name, cin, cout, g in spec:
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


def _median(fn, repeat, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


MODELS = {"mlp": model_mlp, "conv": model_conv, "cnn": model_cnn}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--opt-level", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'model':<6} {'thr':>3} {'nnvm ms':>9} {'ort ms':>9} {'nnvm/ort':>9} "
          f"{'compile s':>9} {'max err':>9}")
    for name in args.models.split(","):
        y, params, onnx_bytes, shape = MODELS[name](rng)
        x = rng.standard_normal(shape).astype(np.float32)
        t0 = time.perf_counter()
        lib = nnvm.compiler.build(y, target="llvm", shape={"x": shape}, params=params,
                                  opt_level=args.opt_level)
        compile_s = time.perf_counter() - t0
        for threads in [int(t) for t in args.threads.split(",")]:
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
            lib.set_num_threads(threads)
            ours = lib.run(x=x)[0]
            theirs = sess.run(None, {"x": x})[0]
            err = float(np.abs(ours - theirs).max())
            t_nnvm = _median(lambda: lib.run(x=x), args.repeat)
            t_ort = _median(lambda: sess.run(None, {"x": x}), args.repeat)
            print(f"{name:<6} {threads:>3} {t_nnvm * 1e3:>9.3f} {t_ort * 1e3:>9.3f} "
                  f"{t_nnvm / t_ort:>9.2f} {compile_s:>9.2f} {err:>9.1e}")
        s = lib.stats()
        print(f"       kernels={s['num_kernels']} fallbacks={s['fallback_ops']} "
              f"activation_bytes={s['activation_bytes']} (naive "
              f"{s['activation_bytes_naive']})")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
