"""``matmul_integer`` and 2-D ``conv_integer`` with a weight param on llvm: the int8 kernels
(``int8_gemm``, ``int8_conv``) with AVX512-VNNI, or AVX2's exact emulation of it (forced
here with ``-mattr=-avx512vnni``), and the int32 templates without AVX2 (``-mattr=-avx2``).
All must give the exact int32
Both must give the exact int32
result over a shape grid: odd K (a partial 4-byte group) or channel counts, N narrower than
a vector or not a multiple of the panel, row counts and output widths that leave a tail
tile, strides, dilations and asymmetric padding, uint8 and int8 on either side, zero points
per tensor, per row and per column. The oracles are the definition in int64 (NumPy), the
reference target, and onnxruntime where it implements the case.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
tvm = pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

ONNX_TYPES = {np.dtype("uint8"): T.UINT8, np.dtype("int8"): T.INT8}
#: the three kernels: VNNI (this CPU's own target), AVX2's exact vpmaddwd emulation
#: (AVX-512 without VNNI takes it too), the int32 templates (no AVX2)
AVX2 = "llvm -mattr=-avx512vnni"
INT32 = "llvm -mattr=-avx2"
LANES_OF = {"llvm": 16, AVX2: 8, INT32: 0}


def _host_lanes(spec: dict) -> int:
    """The int8 kernels' lanes for this CPU's target with ``spec`` added."""
    from nnvm_llvm.compiler.int8_gemm import int8_lanes

    native = tvm.target.codegen.llvm_get_system_cpu()
    with tvm.target.Target({"kind": "llvm", "mcpu": native, **spec}):
        return int8_lanes()


def _targets():
    return [pytest.param("llvm", marks=pytest.mark.skipif(
                _host_lanes({}) != 16, reason="this CPU has no AVX512-VNNI")),
            pytest.param(AVX2, marks=pytest.mark.skipif(
                _host_lanes({"mattr": ["-avx512vnni"]}) != 8, reason="this CPU has no AVX2")),
            INT32]


@pytest.mark.parametrize("cpu,lanes", [("cascadelake", 16), ("icelake-server", 16),
                                       ("znver4", 16), ("skylake-avx512", 8), ("znver3", 8),
                                       ("alderlake", 8), ("x86-64", 0)])
def test_int8_kernels_follow_the_target_cpu_not_this_machine(cpu, lanes):
    """The choice reads the target being built (no code runs here): AVX512-VNNI CPUs get
    the VNNI kernels, AVX2 ones (AVX-512 without VNNI too) the 8-lane emulation, others the
    int32 templates, as does a lowering with no current target."""
    from nnvm_llvm.compiler.int8_gemm import int8_lanes

    assert int8_lanes() == 0
    with tvm.target.Target({"kind": "llvm", "mcpu": cpu}):
        assert int8_lanes() == lanes


def _model(op, a, b, az, bz, **attrs):
    node = helper.make_node(op, ["a", "b", "az", "bz"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "int8", [helper.make_tensor_value_info("a", ONNX_TYPES[a.dtype], a.shape)],
        [helper.make_tensor_value_info("y", T.INT32, [None] * a.ndim)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(az, "az"),
         numpy_helper.from_array(bz, "bz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _run(model, a, target, int8_layouts):
    """Build for ``target``, check the weight layout says which kernel ran and the result
    equals the reference target's; return y."""
    g, params = nnvm.frontend.from_onnx(model, shape={"a": a.shape})
    lib = nnvm.compiler.build(g, target=target, shape={"a": a.shape}, params=params)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    layouts = {p["layout"] for p in lib._plan["packed"].values()}
    # the int8 kernels' layout (by lanes), else the int32 templates' or none (a narrow N)
    assert layouts == ({int8_layouts[LANES_OF[target]]} if LANES_OF[target] else
                       layouts - set(int8_layouts.values())), layouts
    got = np.asarray(lib.run(a=a)[0])
    assert got.dtype == np.int32
    ref = nnvm.compiler.build(g, target="reference", shape={"a": a.shape}, params=params)
    np.testing.assert_array_equal(got, np.asarray(ref.run(a=a)[0]))
    return got


def _check_onnxruntime(model, a, got):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, sess.run(None, {"a": a})[0])


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


GRID = [  # a shape, n, a dtype, b dtype, a zero point per row, b zero point per column
    ((20, 1024), 8210, "uint8", "uint8", False, False),  # ddddocr's classifier
    ((1, 512), 2048, "uint8", "int8", False, False),  # its LSTM step (GEMV)
    ((7, 33), 5, "uint8", "uint8", False, True),  # odd K, N under one vector
    ((13, 130), 70, "uint8", "int8", True, True),  # row tail, N past one panel
    ((2, 5, 67), 100, "uint8", "uint8", False, True),  # batched rows, odd K
    ((6, 3), 17, "int8", "int8", False, False),  # K under one group, int8 activations
    ((11, 64), 48, "int8", "uint8", True, False),
]


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("sa,n,adt,bdt,row_zp,col_zp", GRID,
                         ids=[f"{'x'.join(map(str, g[0]))}x{g[1]}-{g[2]}-{g[3]}" for g in GRID])
def test_matmul_integer_with_weight_is_exact(rng, target, sa, n, adt, bdt, row_zp, col_zp):
    k = sa[-1]
    a, b = _ints(rng, adt, sa), _ints(rng, bdt, (k, n))
    az = _ints(rng, adt, (sa[0],)) if row_zp else np.array(_ints(rng, adt, ()), adt)
    bz = _ints(rng, bdt, (n,)) if col_zp else np.array(_ints(rng, bdt, ()), bdt)
    model = _model("MatMulInteger", a, b, az, bz)
    got = _run(model, a, target, {16: "matmul_vnni", 8: "matmul_vnni8"})
    a64 = a.astype(np.int64) - (az.astype(np.int64)[:, None] if row_zp else az.astype(np.int64))
    np.testing.assert_array_equal(got, a64 @ (b.astype(np.int64) - bz.astype(np.int64)))
    if adt == "uint8" and not row_zp:  # onnxruntime's kernel: uint8 A, scalar A zero point
        _check_onnxruntime(model, a, got)


def _conv_ref(x, w, xz, wz, pads, strides, dil):
    """The definition in int64: the zero-point-shifted input padded with 0."""
    x = x.astype(np.int64) - int(xz)
    w = w.astype(np.int64) - wz.astype(np.int64).reshape(-1, 1, 1, 1)
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (xp.shape[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    y = np.zeros((x.shape[0], w.shape[0], oh, ow), np.int64)
    for r in range(kh):
        for t in range(kw):
            patch = xp[:, :, r * dil[0]:r * dil[0] + (oh - 1) * strides[0] + 1:strides[0],
                       t * dil[1]:t * dil[1] + (ow - 1) * strides[1] + 1:strides[1]]
            y += np.einsum("bchw,oc->bohw", patch, w[:, :, r, t])
    return y


CONVS = [  # x shape, w shape, x dtype, w dtype, pads, strides, dilations, per-channel w zp
    ((1, 48, 16, 40), (192, 48, 3, 3), "uint8", "uint8", (1, 1, 1, 1), (1, 1), (1, 1), False),
    ((1, 1, 64, 160), (24, 1, 3, 3), "uint8", "uint8", (1, 1, 1, 1), (2, 1), (1, 1), False),
    ((1, 8, 17, 30), (24, 8, 3, 3), "int8", "uint8", (1, 1, 1, 1), (2, 2), (1, 1), False),
    ((2, 5, 11, 7), (7, 5, 3, 2), "uint8", "int8", (0, 1, 2, 0), (1, 1), (2, 1), True),
    ((1, 24, 9, 12), (50, 24, 1, 1), "uint8", "uint8", (0, 0, 0, 0), (1, 1), (1, 1), False),
    ((1, 6, 13, 37), (9, 6, 5, 3), "uint8", "int8", (2, 0, 1, 3), (1, 3), (1, 2), False),
    ((1, 64, 8, 20), (256, 64, 3, 3), "uint8", "uint8", (1, 1, 1, 1), (1, 1), (1, 1), False),
    ((1, 3, 5, 72), (10, 3, 3, 3), "uint8", "int8", (1, 1, 1, 1), (1, 1), (1, 1), False),
]


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("xs,ws,xdt,wdt,pads,strides,dil,per_channel", CONVS,
                         ids=["ddddocr-3x3", "1-channel-stride-h", "int8-x-stride2",
                              "perchannel-dilated", "1x1-tail-oc", "odd-everything",
                              "ymm-tail-masked", "ymm-tail-after-chunks"])
def test_conv_integer_with_weight_is_exact(rng, target, xs, ws, xdt, wdt, pads, strides, dil,
                                           per_channel):
    x, w = _ints(rng, xdt, xs), _ints(rng, wdt, ws)
    xz = np.array(_ints(rng, xdt, ()), xdt)
    wz = _ints(rng, wdt, (ws[0],)) if per_channel else np.array(_ints(rng, wdt, ()), wdt)
    model = _model("ConvInteger", x, w, xz, wz, pads=list(pads), strides=list(strides),
                   dilations=list(dil))
    got = _run(model, x, target, {16: "conv2d_vnni", 8: "conv2d_vnni"})
    np.testing.assert_array_equal(got, _conv_ref(x, w, xz, wz, pads, strides, dil))
    if xdt == "uint8" and not per_channel:  # onnxruntime: scalar weight zero point only
        _check_onnxruntime(model, x, got)


@pytest.mark.parametrize("target", _targets())
def test_dynamic_quantize_lstm_packs_each_weight_once(rng, target):
    """The unrolled com.microsoft LSTM multiplies every step by the same R: one param (one
    packed copy) per direction and matrix, not one per step (ddddocr carried 38 copies of
    its 1 MB R, each streamed from memory), and the result still matches onnxruntime."""
    seq, n_in, hid = 5, 12, 16
    inits = {"W": _ints(rng, "int8", (2, n_in, 4 * hid)),
             "R": _ints(rng, "int8", (2, hid, 4 * hid)),
             "B": rng.uniform(-0.1, 0.1, (2, 8 * hid)).astype("float32"),
             "Ws": np.array([0.004, 0.003], "float32"), "Wz": np.zeros(2, "int8"),
             "Rs": np.array([0.002, 0.005], "float32"), "Rz": np.zeros(2, "int8")}
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "W", "R", "B", "", "", "", "",
                                                    "Ws", "Wz", "Rs", "Rz"], ["y"],
                            domain="com.microsoft", hidden_size=hid, direction="bidirectional")
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", T.FLOAT, (seq, 1, n_in))],
        [helper.make_tensor_value_info("y", T.FLOAT, [None] * 4)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    x = rng.standard_normal((seq, 1, n_in)).astype("float32")
    g, params = nnvm.frontend.from_onnx(model, shape={"x": x.shape})
    lib = nnvm.compiler.build(g, target=target, shape={"x": x.shape}, params=params)
    assert len(lib._plan["packed"]) == 4, sorted(lib._plan["packed"])
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.asarray(lib.run(x=x)[0]), want, rtol=1e-5, atol=1e-5)
