"""String ops (ONNX StringConcat, RegexFullMatch, StringSplit, StringNormalizer) and lookups.

Strings are the ``string`` dtype: NumPy object arrays of Python ``str`` (see
``nnvm.dtypes.STRING``). They run on the reference target; native backends have no string
type. Ops whose output size depends on the text (StringSplit's padded width, StringNormalizer
dropping stopwords) carry ``TDynamicShape``, like ``non_zero``.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from ..errors import ShapeError, TypeInferenceError
from ..op import OpPattern, OpSet
from ..params import Param
from .common import broadcast_shape, first_input_shape

defs = OpSet("text")

STRING = "string"
OPAQUE = OpPattern.OPAQUE


def _strings(x) -> np.ndarray:
    """``x`` as an object array of ``str`` (bytes decoded as UTF-8)."""
    x = np.asarray(x)
    if x.dtype == object and all(isinstance(s, str) for s in x.flat):
        return x
    out = np.empty(x.shape, dtype=object)
    for i, s in enumerate(x.flat):
        out.flat[i] = s.decode("utf-8") if isinstance(s, bytes) else str(s)
    return out


def _map(fn, x, otype=object) -> np.ndarray:
    x = _strings(x)
    out = np.empty(x.shape, dtype=otype)
    for i, s in enumerate(x.flat):
        out.flat[i] = fn(s)
    return out


def _string_inputs(n_in: int, out: str | None = STRING):
    """dtype rule: every input is a string; the output is ``out``."""
    def rule(attrs, ins, outs):
        for t in ins:
            if t is not None and t != STRING:
                raise TypeInferenceError(f"expects string inputs; got {t}")
        return [STRING] * n_in, [out] * len(outs)
    return rule


# -- elementwise ------------------------------------------------------------------------------

def _concat_ref(attrs, a, b):
    a, b = np.broadcast_arrays(_strings(a), _strings(b))
    out = np.empty(a.shape, dtype=object)
    for i, (x, y) in enumerate(zip(a.flat, b.flat)):
        out.flat[i] = x + y
    return out


defs.op("string_concat", doc="ONNX StringConcat: elementwise a + b with numpy broadcasting.",
            inputs=("a", "b"), shape=broadcast_shape, dtype=_string_inputs(2),
            reference=_concat_ref, pattern=OPAQUE, support_level=7)


def _regex_ref(attrs, x):
    rx = re.compile(attrs["pattern"])
    return _map(lambda s: rx.fullmatch(s) is not None, x, bool)


def _check_pattern(attrs, ins, outs):
    try:
        re.compile(attrs["pattern"])
    except re.error as exc:
        raise ShapeError(f"invalid regular expression {attrs['pattern']!r}: {exc}") from None
    return first_input_shape(attrs, ins, outs)


defs.op("regex_full_match", doc="ONNX RegexFullMatch: whether each string matches `pattern` "
            "in full (Python re syntax, which covers the RE2 subset ONNX models use).",
            params=[Param("pattern", "str", doc="regular expression")],
            shape=_check_pattern, dtype=_string_inputs(1, "bool"), reference=_regex_ref,
            pattern=OPAQUE, support_level=7)


# -- data-dependent output shapes ---------------------------------------------------------------

def _split_ref(attrs, x):
    x = _strings(x)
    sep = attrs["delimiter"] or None
    maxsplit = -1 if attrs["maxsplit"] is None else attrs["maxsplit"]
    parts = [s.split(sep, maxsplit) for s in x.flat]
    width = max((len(p) for p in parts), default=0)
    subs = np.full((x.size, width), "", dtype=object)
    for i, p in enumerate(parts):
        subs[i, :len(p)] = p
    lengths = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    return subs.reshape(x.shape + (width,)), lengths


defs.op("string_split", doc="ONNX StringSplit: split each string at `delimiter` (runs of "
            "whitespace when empty), at most `maxsplit` times; substrings padded with '' to "
            "the longest split, plus the number of substrings of each element.",
            params=[Param("delimiter", "str", "", "separator; '' = whitespace runs"),
                    Param("maxsplit", "int_or_none", None, "most splits per string")],
            outputs=("substrings", "lengths"),
            shape=lambda attrs, ins, outs: (ins, [None, ins[0]]),
            dtype=lambda attrs, ins, outs: (_string_inputs(1)(attrs, ins, outs)[0],
                                            [STRING, "int64"]),
            reference=_split_ref, pattern=OPAQUE, TDynamicShape=True, support_level=7)


def _strip_accents(s: str) -> str:
    if s.isascii():
        return s
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


def _normalizer_ref(attrs, x):
    x = _strings(x)
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise ShapeError(f"string_normalizer takes shape [C] or [1, C]; got {x.shape}")
    action, sensitive = attrs["case_change_action"], attrs["is_case_sensitive"]
    change = {"LOWER": str.lower, "UPPER": str.upper, "NONE": lambda s: s}[action]
    stops = set(attrs["stopwords"])
    cmp_stops = stops if sensitive else {change(w) for w in stops}

    def drop_stops(s, words):
        return " ".join(t for t in s.split(" ") if t not in words)

    out = []
    for s in x.reshape(-1):
        s = _strip_accents(s)
        if sensitive and stops:
            s = drop_stops(s, stops)
        s = change(s)
        if not sensitive and stops:
            s = drop_stops(s, cmp_stops)
        out.append(s)
    out = [s for s in out if s] or [""]
    res = np.empty(len(out), dtype=object)
    res[:] = out
    return res.reshape((1, -1) if x.ndim == 2 else (-1,))


def _normalizer_shape(attrs, ins, outs):
    """Only the rank is static: dropped stopwords and empty strings shrink the last axis."""
    s = ins[0]
    if s is not None and (len(s) not in (1, 2) or (len(s) == 2 and s[0] != 1)):
        raise ShapeError(f"string_normalizer takes shape [C] or [1, C]; got {s}")
    return ins, [None]


defs.op("string_normalizer", doc="ONNX StringNormalizer: strip accents, drop stopwords "
            "(case-sensitively or not), change case; empty strings are dropped (one '' stays "
            "when nothing is left).",
            params=[Param("case_change_action", "str", "NONE", "LOWER, UPPER or NONE",
                          choices=("LOWER", "UPPER", "NONE")),
                    Param("is_case_sensitive", "bool", False, "stopword matching"),
                    Param("stopwords", "strs", (), "words to remove"),
                    Param("locale", "str", "", "accepted for ONNX; Python str casing is "
                          "locale-independent")],
            shape=_normalizer_shape, dtype=_string_inputs(1), reference=_normalizer_ref,
            pattern=OPAQUE, TDynamicShape=True, support_level=7)
