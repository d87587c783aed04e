"""Models on the ``opencl`` target (fused groups, arena memory plan) against the reference
target, plus export/load, fallback accounting and the backend's error messages."""

import re

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import BackendUnavailableError, NNVMError
from nnvm.testing.models import MODELS

from opencl_devices import REASON

pytestmark = pytest.mark.skipif(REASON is not None, reason=f"opencl unavailable: {REASON}")


def _feed(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype("float32") for k, s in shapes.items()}


def _check(net, params, shapes, opt_level=2, rtol=1e-4, atol=1e-5):
    feed = _feed(shapes)
    ref = nnvm.compiler.build(net, target="reference", shape=shapes, params=params,
                              opt_level=opt_level).run(**feed)
    lib = nnvm.compiler.build(net, target="opencl", shape=shapes, params=params,
                              opt_level=opt_level)
    got = lib.run(**feed)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return lib, feed, got


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_reference(name):
    net, params, shapes = MODELS[name]()
    lib, _, _ = _check(net, params, shapes, opt_level=3)
    st = lib.stats()
    assert st["num_fallback_ops"] == 0, st["fallback_ops"]
    assert st["num_kernels"] < st["num_nodes"], "fusion should merge ops into fewer kernels"
    assert st["activation_bytes"] <= st["activation_bytes_naive"]


def test_export_load_roundtrip(tmp_path):
    net, params, shapes = MODELS["small_cnn"]()
    lib, feed, got = _check(net, params, shapes)
    path = tmp_path / "cnn.nnvm"
    lib.export(str(path))
    import zipfile

    names = zipfile.ZipFile(path).namelist()
    assert "kernels.cl" in names and "plan.json" in names
    lib2 = nnvm.runtime.load(str(path))
    for a, b in zip(lib2.run(**feed), got):
        np.testing.assert_array_equal(a, b)
    assert lib2.stats()["num_kernels"] == lib.stats()["num_kernels"]


def test_op_without_rule_falls_back_and_is_counted():
    x = sym.Variable("x")
    y = sym.relu(sym.topk(sym.exp(x), k=2, axis=-1)[0]) * 2.0
    lib, _, _ = _check(y, {}, {"x": (3, 5)})
    st = lib.stats()
    assert st["num_fallback_ops"] == 1
    assert any("topk" in v for v in st["fallback_ops"].values())
    assert st["num_kernels"] >= 2  # exp before, relu*2 after, on the device


def test_fused_epilogue_and_injective_chain():
    x = sym.Variable("x")
    y = sym.conv2d(x, channels=8, kernel_size=(3, 3), padding=(1, 1), name="c")
    y = sym.relu(y * 0.5 + 1.0)
    y = sym.transpose(sym.reshape(y, shape=(2, 8, 36)), axes=(0, 2, 1))
    z = sym.concatenate(sym.strided_slice(y, begin=(0, 1, 0), end=(2, 36, 8)),
                        sym.pad(y, pad_width=((0, 0), (0, 0), (1, 2))) if False else y, axis=1)
    out = sym.sum(z, axis=(1,)) + sym.max(z, axis=(1,))
    rng = np.random.default_rng(1)
    params = {"c_weight": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
              "c_bias": rng.standard_normal(8).astype("float32")}
    lib, _, _ = _check(out, params, {"x": (2, 3, 6, 6)}, rtol=1e-4, atol=1e-4)
    assert lib.stats()["num_fallback_ops"] == 0


def test_kernel_build_error_names_kernel_and_log():
    from nnvm_opencl.device import select
    from nnvm_opencl.program import KernelBuildError, build_program
    import pyopencl as cl

    _, dev = select()
    ctx = cl.Context([dev])
    src = ("__kernel void good(__global float* a) { a[0] = 1.0f; }\n"
           "__kernel void broken_kernel(__global float* a) {\n  a[0] = undefined_name;\n}\n")
    with pytest.raises(KernelBuildError) as info:
        build_program(ctx, dev, src)
    msg = str(info.value)
    assert "broken_kernel" in msg and "undefined_name" in msg


def test_out_of_device_memory_is_a_clear_error():
    """An arena larger than the device can hold in one buffer fails at build, before any
    allocation, naming the device, the limit, the size asked for and what to do."""
    from nnvm.errors import ExecutionError
    from nnvm_opencl.device import select

    _, dev = select()
    limit = min(int(dev.max_mem_alloc_size), int(dev.global_mem_size))
    n = limit // 4 + 1024  # one float32 input alone overflows the limit
    x = sym.Variable("x")
    with pytest.raises(ExecutionError) as info:
        nnvm.compiler.build(sym.relu(x), target="opencl", shape={"x": (n,)})
    msg = str(info.value)
    assert "out of device memory" in msg and dev.name.strip() in msg
    assert str(limit) in msg and "smaller batch" in msg


def test_bad_target_option_lists_valid_ones():
    x = sym.Variable("x")
    with pytest.raises(NNVMError, match="-device"):
        nnvm.compiler.build(sym.relu(x), target="opencl -bogus=1", shape={"x": (2,)})


def test_bad_kernel_family_is_a_clear_error():
    x = sym.Variable("x")
    with pytest.raises(NNVMError, match="cpu or portable"):
        nnvm.compiler.build(sym.relu(x), target="opencl -kernels=simd", shape={"x": (2,)})


def test_no_matching_device_is_a_clear_error():
    x = sym.Variable("x")
    with pytest.raises(BackendUnavailableError, match="no matching device"):
        nnvm.compiler.build(sym.relu(x), target="opencl -device=no-such-device",
                            shape={"x": (2,)})


def test_plugin_reports_device():
    info = {p.name: p for p in nnvm.plugins()}["opencl"]
    assert info.available and "opencl" in info.summary.lower()


def test_cpu_kernel_variants_on_ragged_shapes():
    """Partial register blocks, K tails, strided/dilated/grouped convolutions and batched
    matmuls (NN, NT, broadcast batch) in one program, against the reference target."""
    rng = np.random.default_rng(3)
    x, a, b, bt = (sym.Variable(n) for n in ("x", "a", "b", "bt"))
    d = sym.dense(sym.Variable("v"), units=7, name="d")  # rows 5, units 7, K 13
    c1 = sym.conv2d(x, channels=12, kernel_size=(3, 3), strides=(2, 2), padding=(1, 1),
                    name="c1")  # 12 channels (partial block of 8), 9x10 -> 5x5 output
    c2 = sym.conv2d(x, channels=12, kernel_size=(3, 3), dilation=(2, 2), padding=(2, 1),
                    groups=2, name="c2")  # groups of 6 output channels, width 8
    c3 = sym.conv2d(x, channels=6, kernel_size=(1, 5), padding=(0, 2), name="c3")
    mm = sym.matmul(a, b)  # (2, 3, 5, 6) @ (5, 6, 8)... broadcast batch
    mt = sym.matmul(a, bt, transpose_b=True)
    net = sym.Group([d, sym.relu(c1), c2 * 2.0, c3, mm, mt])
    shapes = {"v": (5, 13), "x": (2, 4, 9, 10), "a": (2, 3, 5, 6), "b": (3, 6, 8),
              "bt": (1, 9, 6)}
    params = {"d_weight": rng.standard_normal((7, 13)).astype("float32"),
              "d_bias": rng.standard_normal(7).astype("float32"),
              "c1_weight": rng.standard_normal((12, 4, 3, 3)).astype("float32"),
              "c1_bias": rng.standard_normal(12).astype("float32"),
              "c2_weight": rng.standard_normal((12, 2, 3, 3)).astype("float32"),
              "c2_bias": rng.standard_normal(12).astype("float32"),
              "c3_weight": rng.standard_normal((6, 4, 1, 5)).astype("float32"),
              "c3_bias": rng.standard_normal(6).astype("float32")}
    lib, _, _ = _check(net, params, shapes, rtol=1e-4, atol=1e-4)
    assert lib.stats()["num_fallback_ops"] == 0
    if "pthread" in lib.stats()["device"].lower() or "cpu" in lib.stats()["device"].lower():
        kernels = re.split(r"(?=__kernel )", lib.source)
        assert not any("barrier" in k for k in kernels), "CPU variants have no barriers"
        assert sum(bool(re.search(r"float(4|8|16) ", k)) for k in kernels) == 6


@pytest.mark.parametrize("width,stride,pad", [(20, 1, 1), (56, 1, 1), (40, 2, 1), (9, 1, 2),
                                              (80, 1, 0)])
def test_conv_edge_reads_are_masked(width, stride, pad):
    """The CPU convolution reads row edges as whole vectors and masks the lanes outside
    the row; filling the whole arena (guard bytes included) with NaN before a run proves no
    masked lane leaks into a result, for ragged, padded and strided rows."""
    import pyopencl as cl

    rng = np.random.default_rng(width)
    x = sym.Variable("x")
    net = sym.conv2d(x, channels=16, kernel_size=(3, 3), strides=(stride, stride),
                     padding=(pad, pad), name="c")
    shapes = {"x": (1, 8, 7, width)}
    params = {"c_weight": rng.standard_normal((16, 8, 3, 3)).astype("float32"),
              "c_bias": rng.standard_normal(16).astype("float32")}
    feed = _feed(shapes)
    ref = nnvm.compiler.build(net, target="reference", shape=shapes, params=params).run(**feed)
    lib = nnvm.compiler.build(net, target="opencl", shape=shapes, params=params)
    cl.enqueue_fill_buffer(lib.queue, lib.arena, np.float32(np.nan), 0, lib.arena_bytes)
    lib.queue.finish()
    lib._uploaded.clear()  # the params were wiped too: upload them again
    got = lib.run(**feed)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-4)
    if lib.stats()["device"].lower().startswith("portable"):
        assert "& m" in lib.source, "masked edge reads expected on the CPU device"


@pytest.mark.parametrize("op,width,stride,pad,include", [
    ("max_pool2d", 20, 2, 0, False), ("max_pool2d", 33, 1, 1, False),
    ("avg_pool2d", 21, 2, 1, False), ("avg_pool2d", 40, 1, 1, True)])
def test_pool_edge_reads_are_masked(op, width, stride, pad, include):
    """The CPU pooling kernels read window taps as masked vectors (-inf or 0 outside the
    row, and outside lanes not counted by avg): a NaN-filled arena must not change results."""
    import pyopencl as cl

    x = sym.Variable("x")
    kw = {"count_include_pad": include} if op == "avg_pool2d" else {}
    net = getattr(sym, op)(x, pool_size=(3, 3), strides=(stride, stride), padding=(pad, pad),
                           **kw)
    shapes = {"x": (2, 3, 9, width)}
    feed = _feed(shapes)
    ref = nnvm.compiler.build(net, target="reference", shape=shapes).run(**feed)
    lib = nnvm.compiler.build(net, target="opencl", shape=shapes)
    cl.enqueue_fill_buffer(lib.queue, lib.arena, np.float32(np.nan), 0, lib.arena_bytes)
    lib.queue.finish()
    got = lib.run(**feed)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-6)
    assert lib.stats()["num_fallback_ops"] == 0


@pytest.mark.parametrize("direction,layout", [("forward", 0), ("reverse", 1)])
def test_lstm_runs_as_one_kernel(direction, layout):
    """A whole LSTM layer (every time step, all three outputs) in one work-group kernel,
    against the reference; a peephole LSTM has no kernel and runs as a counted host step."""
    rng = np.random.default_rng(7)
    seq, batch, isz, hid = 5, 2, 6, 8
    x, w, r, bias, h0, c0 = (sym.Variable(n) for n in ("x", "w", "r", "bias", "h0", "c0"))
    out = sym.lstm(x, w, r, bias, h0, c0, hidden_size=hid, direction=direction,
                   layout=layout, use_bias=True, use_initial_h=True, use_initial_c=True)
    net = sym.Group([out[0], out[1], out[2]])
    xs = (seq, batch, isz) if layout == 0 else (batch, seq, isz)
    hs = (1, batch, hid) if layout == 0 else (batch, 1, hid)
    shapes = {"x": xs, "h0": hs, "c0": hs}
    params = {"w": rng.standard_normal((1, 4 * hid, isz)).astype("float32") * 0.5,
              "r": rng.standard_normal((1, 4 * hid, hid)).astype("float32") * 0.5,
              "bias": rng.standard_normal((1, 8 * hid)).astype("float32") * 0.1}
    lib, _, _ = _check(net, params, shapes, rtol=1e-4, atol=1e-5)
    st = lib.stats()
    assert st["num_fallback_ops"] == 0 and st["num_kernels"] == 1, st["fallback_ops"]

    p = sym.Variable("p")
    peep = sym.lstm(x, w, r, bias, h0, c0, p, hidden_size=hid, use_bias=True,
                    use_initial_h=True, use_initial_c=True, use_peepholes=True, layout=layout)
    params["p"] = rng.standard_normal((1, 3 * hid)).astype("float32")
    lib, _, _ = _check(peep[0], params, shapes, rtol=1e-4, atol=1e-5)
    assert "peepholes" in str(lib.stats()["fallback_ops"])


def test_reshapes_are_arena_views():
    """A reshape-only step launches nothing: its output aliases its input's bytes, and that
    storage lives until the last reader of either (here ``c`` is allocated after the
    reshape; reusing ``a``'s bytes for it would corrupt ``b``)."""
    x = sym.Variable("x")
    a = sym.relu(x)
    b = sym.reshape(a, shape=(6, 4))
    c = sym.tanh(x * 3.0)
    d = b + sym.reshape(c, shape=(6, 4))
    e = sym.flatten(sym.expand_dims(x, axis=0))  # a view of a graph input
    net = sym.Group([d, sym.exp(b), e])
    lib, _, _ = _check(net, {}, {"x": (2, 3, 4)}, opt_level=0)
    steps = {lib.info.idx.nodes[s.root].op.name: len(s.kernels) for s in lib.steps}
    assert steps["reshape"] == 0 and steps["flatten"] == 0 and steps["expand_dims"] == 0
    assert lib.stats()["num_kernels"] == 5  # relu, mul, tanh, add, exp (opt_level 0)
