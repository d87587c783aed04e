"""Latency of the opencl target (PoCL on CPU here) against onnxruntime and the llvm target.

Reuses the models of bench_llvm.py (each built from the same weights as an ONNX graph for
onnxruntime and as an nnvm symbol), plus the nets of ``nnvm.testing.models`` against the
llvm target. PoCL runs on every core, so onnxruntime gets the same thread count. Prints
median latencies, ratios, compile time (cold when the kernel caches are empty), max error
and peak RSS.

    python benchmarks/bench_opencl.py [--repeat 30] [--models mlp,conv,cnn] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import resource
import time

import numpy as np
import onnxruntime as ort

import nnvm
from nnvm.testing.models import MODELS as NETS

_spec = importlib.util.spec_from_file_location(
    "bench_llvm", pathlib.Path(__file__).with_name("bench_llvm.py"))
bench_llvm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_llvm)


def _median(fn, repeat, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _llvm(net, shapes, params, level):
    try:
        reason = nnvm.backend.get_backend("llvm", require_available=False).is_available()
    except nnvm.errors.NNVMError as exc:
        reason = str(exc)
    if reason is not None:
        return None, reason
    lib = nnvm.compiler.build(net, target="llvm", shape=shapes, params=params, opt_level=level)
    if hasattr(lib, "set_num_threads"):
        lib.set_num_threads(os.cpu_count() or 1)
    return lib, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--models", default=",".join(bench_llvm.MODELS))
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--opt-level", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'model':<10} {'opencl ms':>10} {'ort ms':>9} {'ocl/ort':>8} {'llvm ms':>9} "
          f"{'ocl/llvm':>8} {'compile s':>9} {'max err':>9}")
    for name in [m for m in args.models.split(",") if m]:
        y, params, onnx_bytes, shape = bench_llvm.MODELS[name](rng)
        x = rng.standard_normal(shape).astype(np.float32)
        t0 = time.perf_counter()
        lib = nnvm.compiler.build(y, target="opencl", shape={"x": shape}, params=params,
                                  opt_level=args.opt_level)
        lib.run(x=x)
        compile_s = time.perf_counter() - t0
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
        err = float(np.abs(lib.run(x=x)[0] - sess.run(None, {"x": x})[0]).max())
        t_ocl = _median(lambda: lib.run(x=x), args.repeat)
        t_ort = _median(lambda: sess.run(None, {"x": x}), args.repeat)
        llvm, why = _llvm(y, {"x": shape}, params, args.opt_level)
        t_llvm = _median(lambda: llvm.run(x=x), args.repeat) if llvm is not None else None
        print(f"{name:<10} {t_ocl * 1e3:>10.3f} {t_ort * 1e3:>9.3f} {t_ocl / t_ort:>8.2f} "
              + (f"{t_llvm * 1e3:>9.3f} {t_ocl / t_llvm:>8.2f}" if t_llvm else
                 f"{'n/a':>9} {'n/a':>8}") + f" {compile_s:>9.2f} {err:>9.1e}")
        s = lib.stats()
        print(f"{'':<10} kernels={s['num_kernels']} fallbacks={s['num_fallback_ops']} "
              f"arena={s['arena_bytes']} activation_bytes={s['activation_bytes']} "
              f"(naive {s['activation_bytes_naive']})" + (f" llvm: {why}" if why else ""))
    for name in [m for m in args.nets.split(",") if m]:
        net, params, shapes = NETS[name]()
        feed = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        lib = nnvm.compiler.build(net, target="opencl", shape=shapes, params=params,
                                  opt_level=args.opt_level)
        t_ocl = _median(lambda: lib.run(**feed), args.repeat)
        llvm, why = _llvm(net, shapes, params, args.opt_level)
        t_llvm = _median(lambda: llvm.run(**feed), args.repeat) if llvm is not None else None
        print(f"{name:<10} {t_ocl * 1e3:>10.3f} {'-':>9} {'-':>8} " +
              (f"{t_llvm * 1e3:>9.3f} {t_ocl / t_llvm:>8.2f}" if t_llvm else
               f"{'n/a':>9} {'n/a':>8}") + f"   kernels={lib.stats()['num_kernels']}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
