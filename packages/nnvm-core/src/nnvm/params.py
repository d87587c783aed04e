"""Typed operator parameters: the schema an op declares, and parsing from NNVM's string form.

NNVM stored every attribute as a string (``"(3, 3)"``, ``"True"``) and parsed it into a typed
struct. We keep values typed in memory and only turn them into strings for graph JSON, so a
graph written by the original NNVM loads, and ours writes JSON it could read.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from .errors import AttrError

REQUIRED = object()

#: Attribute kinds an op may declare, with a human description for docs and errors.
KINDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "True or False",
    "str": "a string",
    "ints": "a tuple of integers",
    "floats": "a tuple of numbers",
    "strs": "a tuple of strings",
    "int_or_none": "an integer or None",
    "ints_or_none": "a tuple of integers or None",
    "dtype": "a dtype name such as 'float32'",
    "any": "any JSON-like value",
}

from .dtypes import DTYPES  # noqa: E402 - re-exported: the valid dtype names


@dataclasses.dataclass(frozen=True)
class Param:
    """One typed operator parameter.

    Attributes:
        name: the attribute name used in symbols, JSON and docs.
        kind: one of ``KINDS``.
        default: the default value, or ``REQUIRED``.
        doc: one line for the generated docstring.
        choices: allowed values for enumerations (e.g. ``("NCHW", "NHWC")``).
    """

    name: str
    kind: str
    default: Any = REQUIRED
    doc: str = ""
    choices: tuple | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def _from_string(text: str) -> Any:
    """Parse NNVM's string spelling of a value (a Python literal, or a bare word)."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if text in ("None", "none", ""):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text  # a bare word such as NCHW or float32


def parse_value(param: Param, value: Any, where: str) -> Any:
    """Convert ``value`` (typed, or NNVM's string form) into ``param``'s kind.

    Raises:
        AttrError: the value cannot be read as the declared kind.
    """
    raw = value
    if isinstance(value, str) and param.kind not in ("str", "dtype"):
        value = _from_string(value)
    try:
        out = _coerce(param.kind, value)
    except (TypeError, ValueError) as exc:
        raise AttrError(
            f"{where}: attribute '{param.name}' must be {KINDS[param.kind]}; got {raw!r} ({exc}). "
            f"Pass e.g. {param.name}={_example(param.kind)}") from None
    if param.choices is not None and out not in param.choices:
        raise AttrError(f"{where}: attribute '{param.name}' got {out!r}; "
                        f"expected one of {', '.join(map(repr, param.choices))}")
    return out


def _example(kind: str) -> str:
    return {"int": "1", "float": "0.5", "bool": "True", "str": "'x'", "ints": "(1, 1)",
            "floats": "(0.5, 1.0)", "strs": "('a',)", "int_or_none": "None",
            "ints_or_none": "None", "dtype": "'float32'", "any": "1"}[kind]


def _coerce(kind: str, v: Any) -> Any:
    import numpy as np

    if kind == "any":
        return v
    if kind == "int_or_none":
        return None if v is None else _coerce("int", v)
    if kind == "ints_or_none":
        return None if v is None else _coerce("ints", v)
    if kind == "int":
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            if isinstance(v, float) and v.is_integer():
                return int(v)
            raise TypeError(f"{type(v).__name__} is not an integer")
        return int(v)
    if kind == "float":
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
            raise TypeError(f"{type(v).__name__} is not a number")
        return float(v)
    if kind == "bool":
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer)) and v in (0, 1):
            return bool(v)
        raise TypeError(f"{type(v).__name__} is not a bool")
    if kind == "str":
        if not isinstance(v, str):
            raise TypeError(f"{type(v).__name__} is not a string")
        return v
    if kind == "dtype":
        name = v if isinstance(v, str) else np.dtype(v).name
        name = {"float": "float32", "int": "int64", "double": "float64"}.get(name, name)
        if name not in DTYPES:
            raise ValueError(f"unknown dtype; valid: {', '.join(DTYPES)}")
        return name
    if kind == "strs" and isinstance(v, str) and v[:1] in "([" and v[-1:] in ")]":
        # unquoted names, as written before strings in tuples were quoted: "(a, b)"
        v = tuple(x.strip() for x in v[1:-1].split(",") if x.strip())
    if kind in ("ints", "floats", "strs"):
        if isinstance(v, (int, float, str, np.number)) and not isinstance(v, bool):
            v = (v,)
        if not isinstance(v, (tuple, list, np.ndarray)):
            raise TypeError(f"{type(v).__name__} is not a tuple")
        item = {"ints": "int", "floats": "float", "strs": "str"}[kind]
        return tuple(_coerce(item, x) for x in v)
    raise TypeError(f"unknown attribute kind {kind!r}")


def to_string(value: Any, _nested: bool = False) -> str:
    """NNVM's string spelling of a typed value, as written into graph JSON. A string on its
    own stays a bare word (``NCHW``); inside a tuple or list it is quoted, so that
    ``("input", "state")`` reads back as two strings, not one."""
    if isinstance(value, tuple):
        if len(value) == 1:
            return f"({to_string(value[0], True)},)"
        return "(" + ", ".join(to_string(x, True) for x in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(to_string(x, True) for x in value) + "]"
    if isinstance(value, str):
        return repr(value) if _nested else value
    return repr(value)


def string_to_value(text: str) -> Any:
    """Best-effort typed reading of an annotation string (used for free-form node attributes)."""
    return _from_string(text)
