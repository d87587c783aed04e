"""String ops (nnvm/ops/text.py), the ``string`` dtype and the float8_e8m0 cast kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx.numpy_helper import to_float8e8m0

import nnvm
from nnvm import dtypes, sym
from nnvm.errors import NNVMError


def _strings(*items, shape=None):
    arr = np.empty(len(items), dtype=object)
    arr[:] = list(items)
    return arr.reshape(shape or (len(items),))


def _run(out, **feed):
    shapes = {k: v.shape for k, v in feed.items()}
    types = {k: dtypes.name_of(v) for k, v in feed.items()}
    lib = nnvm.compiler.build(out, "reference", shape=shapes, dtype=types)
    return lib.run(**feed)


def test_string_dtype_round_trips_and_refuses_dlpack():
    assert "string" in dtypes.DTYPES
    assert dtypes.np_dtype("string") == np.dtype(object)
    assert dtypes.name_of(_strings("a")) == "string"
    with pytest.raises(NNVMError, match="no DLPack type"):
        dtypes.dl_type("string")


def test_string_concat_broadcasts():
    a, b = sym.Variable("a"), sym.Variable("b")
    (out,) = _run(sym.string_concat(a, b), a=_strings("cat", "dog", "的"), b=_strings("s"))
    assert out.dtype == object and out.tolist() == ["cats", "dogs", "的s"]


def test_regex_full_match_needs_the_whole_string():
    x = sym.Variable("x")
    (out,) = _run(sym.regex_full_match(x, pattern=r"www\.\w+\.com"),
                  x=_strings("www.a.com", "www.a.com.au", "xwww.a.com", shape=(3, 1)))
    assert out.dtype == bool and out.reshape(-1).tolist() == [True, False, False]


def test_regex_full_match_rejects_a_bad_pattern():
    x = sym.Variable("x")
    with pytest.raises(NNVMError, match="invalid regular expression"):
        _run(sym.regex_full_match(x, pattern="(unclosed"), x=_strings("a"))


def test_string_split_pads_and_counts():
    x = sym.Variable("x")
    subs, lengths = _run(sym.Group(list(sym.string_split(x, delimiter="."))),
                         x=_strings("a.b.c", "d", "", shape=(3,)))
    assert subs.shape == (3, 3) and subs.tolist() == [["a", "b", "c"], ["d", "", ""],
                                                      ["", "", ""]]
    assert lengths.dtype == np.int64 and lengths.tolist() == [3, 1, 1]
    subs, lengths = _run(sym.Group(list(sym.string_split(x, maxsplit=1))),
                         x=_strings("a  b c", shape=(1,)))
    assert subs.tolist() == [["a", "b c"]] and lengths.tolist() == [2]


def test_string_normalizer_drops_stopwords_and_changes_case():
    x = sym.Variable("x")
    out = sym.string_normalizer(x, case_change_action="UPPER", stopwords=("monday",))
    (got,) = _run(out, x=_strings("Monday", "tuesday", "café", shape=(1, 3)))
    assert got.tolist() == [["TUESDAY", "CAFE"]]
    (got,) = _run(sym.string_normalizer(x, is_case_sensitive=True, stopwords=("monday",)),
                  x=_strings("monday", shape=(1,)))
    assert got.tolist() == [""]  # everything dropped: one empty string stays


def test_string_normalizer_shape_error_names_the_rank():
    x = sym.Variable("x")
    with pytest.raises(NNVMError, match=r"\[C\] or \[1, C\]"):
        _run(sym.string_normalizer(x), x=_strings("a", "b", "c", "d", shape=(2, 2)))


def test_string_ops_refuse_numbers():
    x = sym.Variable("x")
    with pytest.raises(NNVMError, match="string inputs"):
        nnvm.compiler.build(sym.regex_full_match(x, pattern="a"), "reference",
                            shape={"x": (2,)}, dtype={"x": "float32"})


@pytest.mark.parametrize("mode", ["up", "nearest", "down"])
@pytest.mark.parametrize("saturate", [True, False])
def test_cast_e8m0_matches_onnx(mode, saturate):
    x = np.array([0.0, 1.0, 1.5, 3.0, 1e-39, 3.4e38, np.inf, -2.5, np.nan], np.float32)
    (got,) = _run(sym.cast_e8m0(sym.Variable("x"), round_mode=mode, saturate=saturate), x=x)
    want = to_float8e8m0(x, saturate, mode)
    assert got.dtype == ml_dtypes.float8_e8m0fnu
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
