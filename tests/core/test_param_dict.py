"""The NNVM/TVM param-dict format: every dtype round-trips, and TVM reads ours and we theirs."""

from __future__ import annotations

import pathlib
import struct

import numpy as np
import pytest

import nnvm
from nnvm.errors import SerializationError
from nnvm.serialization.param_dict import LIST_MAGIC, load_param_dict, save_param_dict

ml_dtypes = pytest.importorskip("ml_dtypes")
DATA = pathlib.Path(__file__).parent / "data"


def vector() -> dict[str, np.ndarray]:
    """The arrays in data/tvm_0.27_params.bin (written by tvm.runtime.save_param_dict)."""
    return {
        "w_f32": np.arange(6, dtype="float32").reshape(2, 3) / 4,
        "w_f64": np.linspace(-1, 1, 5),
        "w_f16": np.array([[0.5, -2.0], [65504.0, 1e-3]], dtype="float16"),
        "w_bf16": np.array([1.5, -3.0, 256.0], dtype=ml_dtypes.bfloat16),
        "w_i8": np.array([-128, 0, 127], dtype="int8"),
        "w_u8": np.arange(250, 256, dtype="uint8"),
        "w_i16": np.array([-30000, 30000], dtype="int16"),
        "w_i32": np.arange(-3, 3, dtype="int32").reshape(3, 2),
        "w_i64": np.array([-2**62, 2**62], dtype="int64"),
        "w_u16": np.array([65535], dtype="uint16"),
        "w_u32": np.array([4000000000], dtype="uint32"),
        "w_u64": np.array([2**63 + 5], dtype="uint64"),
        "w_bool": np.array([[True, False, True]]),
        "scalar": np.array(2.5, dtype="float32"),
        "empty": np.zeros((0, 4), dtype="float32"),
    }


def _assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype, k
        assert got[k].shape == v.shape, k
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_roundtrip_every_dtype_and_0d():
    want = vector()
    _assert_same(load_param_dict(save_param_dict(want)), want)


def test_reads_bytes_written_by_tvm_checked_in():
    blob = (DATA / "tvm_0.27_params.bin").read_bytes()
    _assert_same(load_param_dict(blob), vector())
    assert save_param_dict(vector()) == blob  # byte-identical to TVM's writer


def test_roundtrip_non_contiguous_and_big_endian_and_lists():
    a = np.arange(12, dtype="float32").reshape(3, 4).T  # Fortran-ordered view
    b = np.arange(3, dtype=">i4")
    got = load_param_dict(save_param_dict({"a": a, "b": b, "c": [[1.0, 2.0]]}))
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["b"], b)
    assert got["b"].dtype == np.dtype("int32") and got["c"].shape == (1, 2)


def test_compiler_api_aliases():
    blob = nnvm.compiler.save_param_dict({"w": np.ones(2, "float32")})
    assert struct.unpack("<Q", blob[:8])[0] == LIST_MAGIC == 0xF7E58D4F05049CB7
    np.testing.assert_array_equal(nnvm.compiler.load_param_dict(blob)["w"], [1, 1])


# -- interop with the installed TVM (both directions, every dtype) ----------------------------

@pytest.fixture(scope="module")
def tvm_runtime():
    tvm = pytest.importorskip("tvm", reason="apache-tvm not installed")
    rt = tvm.runtime
    if not hasattr(rt, "load_param_dict") or not hasattr(rt, "save_param_dict"):
        pytest.skip("this TVM has no tvm.runtime.load_param_dict/save_param_dict")
    return rt


def test_tvm_reads_our_bytes(tvm_runtime):
    want = vector()
    got = tvm_runtime.load_param_dict(save_param_dict(want))
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        t = got[k]
        assert str(t.dtype) == v.dtype.name, k
        assert tuple(t.shape) == v.shape, k  # 0-d stays 0-d
        np.testing.assert_array_equal(t.numpy(), v, err_msg=k)


def test_we_read_tvm_save_param_dict_output(tvm_runtime):
    want = vector()
    blob = bytes(tvm_runtime.save_param_dict(want))
    _assert_same(load_param_dict(blob), want)


# -- refusals -----------------------------------------------------------------------------------

def test_save_refuses_what_the_format_cannot_hold():
    with pytest.raises(SerializationError, match="dtype"):
        save_param_dict({"c": np.ones(2, "complex64")})
    with pytest.raises(SerializationError, match="not a numeric array"):
        save_param_dict({"o": np.array([object()])})
    with pytest.raises(SerializationError, match="strings"):
        save_param_dict({1: np.ones(1)})
    with pytest.raises(SerializationError, match="dict"):
        save_param_dict([np.ones(1)])


def _header(n: int) -> bytes:
    return struct.pack("<QQQ", LIST_MAGIC, 0, n)


@pytest.mark.parametrize("blob, match", [
    (b"", "truncated"),
    (b"\x00" * 16, "bad magic"),
    (_header(1), "truncated"),
    (_header(2**40), "exceeds"),
    (_header(1) + struct.pack("<Q", 2) + b"\xff\xfe", "not UTF-8"),
    (_header(1) + struct.pack("<Q", 1) + b"a" + struct.pack("<Q", 2), "1 names but 2"),
    (_header(2) + (struct.pack("<Q", 1) + b"a") * 2 + struct.pack("<Q", 2), "twice"),
    (_header(1) + struct.pack("<Q", 1) + b"a" + struct.pack("<Q", 1) + b"\x00" * 32,
     "bad array magic"),
])
def test_malformed_headers(blob, match):
    with pytest.raises(SerializationError, match=match):
        load_param_dict(blob)


def _one_array(ndim=1, code=2, bits=32, lanes=1, shape=(2,), nbytes=8, data=b"\x00" * 8):
    return (_header(1) + struct.pack("<Q", 1) + b"w" + struct.pack("<Q", 1)
            + struct.pack("<QQiii", 0xDD5E40F096B4A13F, 0, 1, 0, ndim)
            + struct.pack("<BBH", code, bits, lanes) + struct.pack(f"<{len(shape)}q", *shape)
            + struct.pack("<q", nbytes) + data)


def test_array_builder_makes_a_valid_blob():
    np.testing.assert_array_equal(load_param_dict(_one_array())["w"], [0, 0])


@pytest.mark.parametrize("kw, match", [
    ({"ndim": 99}, "ndim 99"),
    ({"ndim": -1}, "ndim -1"),
    ({"lanes": 4}, "lanes"),
    ({"code": 9}, "DLDataType"),
    ({"bits": 12}, "DLDataType"),
    ({"code": 2, "bits": 8}, "DLDataType"),
    ({"shape": (-2,)}, "negative"),
    ({"nbytes": 7}, "does not match"),
    ({"shape": (2**62,), "nbytes": 8}, "does not match"),  # no int64 overflow
    ({"data": b"\x00" * 4}, "truncated"),
    ({"data": b"\x00" * 9}, "unexpected bytes"),
])
def test_malformed_arrays(kw, match):
    with pytest.raises(SerializationError, match=match):
        load_param_dict(_one_array(**kw))


def test_load_refuses_non_bytes():
    with pytest.raises(SerializationError, match="expected bytes"):
        load_param_dict("not bytes")
