"""One workload of the roofline sweep: its one-op ONNX graph, work, traffic and timings.

Why a one-op *ONNX* graph: it is what a user's model hands nnvm for that node (imported with
``nnvm.frontend.from_onnx``, built with ``nnvm.compiler.build`` for ``llvm`` at opt_level 3, so
the sweep exercises whatever schedule the build picks, not one module's internals), and
onnxruntime runs the very same bytes for context.

The roofline of a workload: FLOPs from the project's own counter
(``nnvm.runtime.profiler.node_flops``, on the imported graph's main node), compulsory traffic =
every input, weight and output moved once, arithmetic intensity = FLOPs / bytes, attainable =
min(peak FLOP/s, intensity x bandwidth). The bandwidth is measured, not assumed (``bandwidth``).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "corpus"))
from bench import SETTLE_SECONDS  # noqa: E402 - shared with the corpus benchmark
from bench import block_timer as per_call  # noqa: E402

#: opset of the one-op graph when the workload does not name one (extras)
DEFAULT_OPSET = 17
#: bytes of each array of the streaming kernels that measure bandwidth (far beyond any cache)
STREAM_BYTES = 256 << 20
#: most runs in one timing block (a 20-ns kernel still fills a block of a few ms)
MAX_RUNS = 1_000_000


def onnx_model(w: dict, seed: int = 0):
    """``(ModelProto, feed)``: the workload as a one-node ONNX graph; constant inputs are
    initializers (random, deterministic), the others are graph inputs fed from ``feed``."""
    from onnx import TensorProto, helper, numpy_helper, shape_inference

    rng = np.random.default_rng(seed)
    ins, inits, graph_inputs, feed = [], [], [], {}
    for i, spec in enumerate(w["inputs"]):
        if spec is None:
            ins.append("")
            continue
        name = f"in{i}"
        ins.append(name)
        arr = _values(w, i, spec, rng)
        if spec["const"]:
            inits.append(numpy_helper.from_array(arr, name))
        else:
            feed[name] = arr
            graph_inputs.append(helper.make_tensor_value_info(
                name, TensorProto.INT32 if arr.dtype == np.int32 else TensorProto.FLOAT,
                list(arr.shape)))
    outs = [f"out{k}" for k in range(w["outputs"])]
    node = helper.make_node(w["op"], ins, outs, **w["attrs"])
    typed = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    graph = helper.make_graph([node], f"roofline_{w['cls']}", graph_inputs, typed, inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", int(w.get("opset") or DEFAULT_OPSET))])
    model.ir_version = 8
    return shape_inference.infer_shapes(model, strict_mode=True), feed  # typed outputs


def _values(w: dict, i: int, spec: dict, rng) -> np.ndarray:
    """Inputs a real model would hold: small weights, positive variances, full sequence
    lengths (a zero variance or length would turn the kernel into a different workload)."""
    shape = tuple(spec["shape"])
    if spec["dtype"] == "int32":  # recurrent sequence_lens: every sequence runs every step
        steps = w["inputs"][0]["shape"][1 if w["attrs"].get("layout") else 0]
        return np.full(shape, steps, np.int32)
    if w["op"] == "BatchNormalization" and i == 4:
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    scale = 0.1 if spec["const"] else 1.0
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def import_graph(model, feed: dict):
    """nnvm's import of the one-op graph with its shapes inferred: ``(graph, params)``."""
    import nnvm

    shapes = {k: v.shape for k, v in feed.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    seeds = {**{k: np.shape(v) for k, v in params.items()}, **shapes}
    types = {**{k: np.asarray(v).dtype.name for k, v in params.items()},
             **{k: v.dtype.name for k, v in feed.items()}}
    graph = graph.apply(["InferShape", "InferType"], shape_inputs=seeds, dtype_inputs=types)
    return graph, params


def flops(graph) -> tuple[float, str]:
    """FLOPs of the workload and the nnvm op they were counted on: the imported graph's
    largest node by ``profiler.node_flops`` (a 1-D conv imports as reshape + conv2d + reshape,
    a Gemm with an untransposed weight as transpose + dense: the views are not the work)."""
    from nnvm.runtime.profiler import node_flops

    idx = graph.index
    best, op = 0.0, "?"
    for nid, node in enumerate(idx.nodes):
        if node.op is not None:
            f = node_flops(graph, nid)
            if f > best:
                best, op = f, node.op.name
    return best, op


def traffic(model, feed: dict, outputs: list[np.ndarray]) -> int:
    """Compulsory bytes: every input and initializer read once, every output written once."""
    from onnx import numpy_helper

    weights = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    return int(weights + sum(v.nbytes for v in feed.values())
               + sum(np.asarray(o).nbytes for o in outputs))


def build(graph, params, feed: dict):
    """The one-op graph built for ``llvm`` at opt_level 3 (the user's path)."""
    import nnvm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nnvm.compiler.build(graph, target="llvm", opt_level=3, params=params,
                                   shape={k: v.shape for k, v in feed.items()},
                                   dtype={k: v.dtype.name for k, v in feed.items()})


def ort_session(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def ort_runner(sess, feed: dict):
    """onnxruntime's cheapest repeated call: inputs bound once (no copy), outputs kept in
    its arena (nnvm's ``benchmark`` likewise times kernels on bound inputs)."""
    binding = sess.io_binding()
    for name, arr in feed.items():
        binding.bind_cpu_input(name, arr)
    for o in sess.get_outputs():
        binding.bind_output(o.name)
    return lambda: sess.run_with_iobinding(binding)


def nnvm_block(lib, seconds: float):
    """A block timer for an nnvm module: ``lib.benchmark`` (its kernels on bound inputs,
    timed inside the C executor in samples of back-to-back runs, median) over about
    ``seconds``; a timing loop here would add more Python per call than a small kernel
    takes."""
    once = lib.benchmark(repeat=3, warmup=1)
    repeat = int(min(MAX_RUNS, max(3, seconds / max(once, 1e-9))))

    def block():
        time.sleep(SETTLE_SECONDS)  # as ``per_call``: the previous block's spinners park
        return lib.benchmark(repeat=repeat, warmup=1)
    return block


def interleaved(blocks_of: dict, blocks: int) -> dict:
    """Median seconds per call of every block timer (``name -> () -> seconds per call``),
    run in alternating blocks so that a noisy machine slows all alike; every block pauses
    ``SETTLE_SECONDS`` first (``per_call`` and ``nnvm_block`` do)."""
    times: dict[str, list[float]] = {k: [] for k in blocks_of}
    for _ in range(blocks):
        for name, block in blocks_of.items():
            times[name].append(block())
    return {k: float(np.median(v)) for k, v in times.items()}


def roofline(work: float, nbytes: int, seconds: float, peak_gflops: float,
             bw_gbs: float, floor_s: float = 0.0) -> dict:
    """Achieved and attainable GFLOP/s of one timing and how far it is from the roof;
    ``floor_s``: the cost of one kernel call (``call_floor``), added to the roof's time
    (a kernel's time is at least one call plus its traffic or its math: it matters only
    for kernels of well under a microsecond)."""
    ai = work / nbytes if nbytes else float("inf")
    attainable = min(peak_gflops, ai * bw_gbs)
    if floor_s > 0 and attainable > 0 and work > 0:
        attainable = work / (work / (attainable * 1e9) + floor_s) / 1e9
    achieved = work / seconds / 1e9 if seconds > 0 else 0.0
    return {"ai": ai, "attainable_gflops": attainable, "achieved_gflops": achieved,
            "bound": "compute" if peak_gflops <= ai * bw_gbs else "memory",
            "x_roofline": attainable / achieved if achieved > 0 else float("inf")}


def _stream(n: int):
    """``y = x + 1`` over ``n`` floats built by nnvm for ``llvm``, inputs bound: a kernel that
    only streams, timed by ``lib.benchmark``."""
    from onnx import TensorProto, helper

    node = helper.make_node("Add", ["x", "one"], ["y"])
    graph = helper.make_graph(
        [node], "stream", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", DEFAULT_OPSET)])
    feed = {"x": np.ones(n, np.float32)}
    lib = build(*import_graph(model, feed), feed)
    lib.run(**feed)
    return lib


def _memcpy_gbs(n: int, seconds: float) -> float:
    """GB/s (read + written) of NumPy copying ``n`` floats, best of three blocks."""
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    return 2 * src.nbytes / min(per_call(lambda: np.copyto(dst, src), seconds / 3)
                                for _ in range(3)) / 1e9


def bandwidth(threads: list[int], nbytes: int = STREAM_BYTES,
              seconds: float = 0.3) -> tuple[dict, str]:
    """Memory bandwidth (GB/s of counted bytes) per thread count, measured now.

    Two streaming kernels over ``nbytes`` arrays (default ``STREAM_BYTES``), bytes counted as
    the roofline counts them (read once + written once): NumPy's copy (glibc memcpy,
    non-temporal stores: the best one core streams) and ``y = x + 1`` compiled by nnvm for
    ``llvm`` at each thread count (what generated code with that many threads streams). The
    roof is the higher of the two, so a kernel is never measured against less bandwidth than
    the machine showed.
    """
    n = nbytes // 4
    copy = _memcpy_gbs(n, seconds)
    lib = _stream(n)
    out, notes = {}, [f"memcpy {copy:.1f}"]
    for t in threads:
        lib.set_num_threads(t)
        add = 2 * n * 4 / lib.benchmark(repeat=5, warmup=1) / 1e9
        out[t] = max(copy, add)
        notes.append(f"llvm add {t}t {add:.1f}")
    del lib
    return out, "GB/s: " + ", ".join(notes)


class DramProbe:
    """The DRAM stream of :func:`bandwidth` (nnvm's ``y = x + 1`` over ``nbytes``, llvm),
    timed in each workload's own interleaved blocks: the bandwidth the machine gave *then*.

    Why: the sweep's bandwidth is measured once, at its start, on a VM that shares its host's
    L3 and memory bus; over a 10-minute sweep the same memory-bound kernel ran 640 us in one
    sweep and 1,445 us in the next. The stream timed next to the workload is the same
    reasoning as timing onnxruntime in the same interleaved run: whatever the neighbours did
    to one, they did to the other. Its bandwidth is absolute (bytes read + written / median
    seconds), not scaled from the start, so a noisy start block does not skew every row."""

    def __init__(self, nbytes: int = STREAM_BYTES):
        self.lib = _stream(nbytes // 4)
        self.nbytes = nbytes

    def block(self, threads: int):
        """A block timer (seconds per call) of the stream at ``threads`` threads."""
        def run():
            time.sleep(SETTLE_SECONDS)
            self.lib.set_num_threads(threads)
            return self.lib.benchmark(repeat=3, warmup=1)
        return run

    def gbs(self, seconds: float) -> float:
        """GB/s of one stream call that took ``seconds`` (bytes as the roofline counts)."""
        return 2 * self.nbytes / seconds / 1e9


def call_floor(curve: list) -> float:
    """Seconds of the smallest stream call of a cache-bandwidth curve (64 bytes moved): the
    least any kernel call costs through the same executor, which a roofline of bytes and
    FLOPs alone leaves out (a 552-byte grouped conv "needs" 19 ns at DRAM speed; one call
    of the 64-byte stream takes 8 ns)."""
    traffic, gbs = curve[0]
    return traffic / gbs / 1e9


#: the square MatMul whose speed measures the compute peak (4 GFLOP: compute-bound)
PEAK_MATMUL = 1024


def compute_peak(threads: list[int], model: dict, n: int = PEAK_MATMUL,
                 seconds: float = 0.3) -> tuple[dict, str]:
    """Peak GFLOP/s per thread count: the higher of ``model`` (the nominal figure from the
    CPU's flags and reported clock) and what an ``n x n x n`` float32 MatMul reaches now,
    under onnxruntime (MLAS) and under nnvm's ``llvm`` build, best of three blocks each.

    Why measured: the nominal clock is the base clock a VM reports (2.6 GHz here), while the
    core runs its FMAs at a boost clock; dense kernels reached 100-110 GFLOP/s per thread
    against a nominal 83, so compute-bound "x roof" figures came out below 1 and flattered
    every compute-bound kernel. The roof is never below what a real kernel reached."""
    square = {"shape": [n, n], "dtype": "float32"}
    model_proto, feed = onnx_model({"op": "MatMul", "cls": "peak", "attrs": {}, "outputs": 1,
                                    "inputs": [{**square, "const": False},
                                               {**square, "const": True}]})
    work = 2.0 * n ** 3
    lib = build(*import_graph(model_proto, feed), feed)
    out, notes = {}, []
    for t in threads:
        lib.set_num_threads(t)
        lib.run(**feed)
        nnvm_s = min(lib.benchmark(repeat=max(2, int(seconds / 0.05)), warmup=1)
                     for _ in range(3))
        ort_call = ort_runner(ort_session(model_proto, t), feed)
        ort_s = min(per_call(ort_call, seconds / 3) for _ in range(3))
        ort_g, nnvm_g = work / ort_s / 1e9, work / nnvm_s / 1e9
        out[t] = max(model[t], ort_g, nnvm_g)
        notes.append(f"{t}t MatMul {n}^3 onnxruntime {ort_g:.0f}, nnvm {nnvm_g:.0f}, "
                     f"nominal {model[t]:.0f}")
    del lib
    return out, "GFLOP/s: " + "; ".join(notes)


#: traffic (bytes read + written) of the cache-level streams: 64 B (one call's cost) to
#: 256 MiB (DRAM)
CACHE_TRAFFIC = tuple(1 << (6 + 2 * k) for k in range(12))


def cache_bandwidth(threads: list[int], traffic_sizes=CACHE_TRAFFIC,
                    seconds: float = 0.02) -> dict:
    """``{threads: [(traffic bytes, GB/s), ...]}``: what the ``llvm`` stream kernel reaches
    moving that much data, from a call that is all overhead (64 B) through the cache levels
    to DRAM.

    Why: the sweep repeats each kernel on the same buffers, so a workload of a few hundred KB
    runs from cache and beats the DRAM roof without being any good, while one of a few bytes
    cannot beat the cost of a kernel call however good it is. A stream kernel moving the same
    bytes, built and called the same way, is the bound that holds at both ends.
    """
    curve: dict[int, list] = {t: [] for t in threads}
    for traffic in traffic_sizes:
        n = traffic // 8
        lib = _stream(n)
        for t in threads:
            lib.set_num_threads(t)
            once = lib.benchmark(repeat=3, warmup=1)
            repeat = int(min(MAX_RUNS, max(3, seconds / max(once, 1e-9))))
            best = min(lib.benchmark(repeat=repeat, warmup=1) for _ in range(3))
            curve[t].append((traffic, traffic / best / 1e9))
        del lib
    return curve


def bandwidth_at(curve: list, nbytes: int, dram: float) -> float:
    """The bandwidth a stream moving ``nbytes`` reaches: that of the smallest measured stream
    moving at least as much; below the smallest, that stream's time is the floor (GB/s that
    give the same time); the DRAM figure beyond the largest."""
    traffic, gbs = curve[0]
    if nbytes < traffic:
        return nbytes / (traffic / gbs)
    return next((gbs for traffic, gbs in curve if traffic >= nbytes), dram)
