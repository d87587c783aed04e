"""``matmul_integer`` with a weight param on llvm: the AVX512-VNNI kernel (``int8_gemm``)
where the target has the feature, the int32 ``dense`` template where it does not (forced
here with ``-mattr=-avx512vnni``). Both must give the exact int32 product over a shape grid:
odd K (a partial 4-byte group), N narrower than a vector or not a multiple of the panel,
row counts that leave a tail tile, uint8 and int8 on either side, zero points per tensor,
per row and per column. The oracle is the definition in int64 (NumPy), and onnxruntime
where it implements the case.
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
NO_VNNI = "llvm -mattr=-avx512vnni"


def _targets():
    vnni = pytest.param("llvm", marks=pytest.mark.skipif(
        not _host_has_vnni(), reason="this CPU has no AVX512-VNNI (the int32 path runs instead)"))
    return [vnni, NO_VNNI]


def _host_has_vnni() -> bool:
    """Whether this CPU (``-mcpu=native``) gets the VNNI kernel."""
    from nnvm_llvm.compiler.int8_gemm import has_vnni

    with tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()}):
        return has_vnni(16)


def _model(a, b, az, bz):
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    graph = helper.make_graph(
        [node], "mmi", [helper.make_tensor_value_info("a", ONNX_TYPES[a.dtype], a.shape)],
        [helper.make_tensor_value_info("y", T.INT32, [None] * a.ndim)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(az, "az"),
         numpy_helper.from_array(bz, "bz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


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
    model = _model(a, b, az, bz)
    g, params = nnvm.frontend.from_onnx(model, shape={"a": sa})
    lib = nnvm.compiler.build(g, target=target, shape={"a": sa}, params=params)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    layouts = {p["layout"] for p in lib._plan["packed"].values()}
    # without VNNI: the int32 template's panels ("matmul"), or none for a narrow N
    assert (layouts == {"matmul_vnni"}) == (target == "llvm"), layouts
    got = np.asarray(lib.run(a=a)[0])
    a64 = a.astype(np.int64) - (az.astype(np.int64)[:, None] if row_zp else az.astype(np.int64))
    want = a64 @ (b.astype(np.int64) - bz.astype(np.int64))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    if adt == "uint8" and not row_zp:  # onnxruntime's kernel: uint8 A, scalar A zero point
        ort = pytest.importorskip("onnxruntime")
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(got, sess.run(None, {"a": a})[0])
