"""Bounded JSON parsing and a small schema validator for artifact members.

Why not index into ``json.loads`` output directly: a hostile or corrupt member then fails
wherever the code first touches it, as ``KeyError``, ``IndexError``, ``TypeError``,
``RecursionError`` or a ``MemoryError`` for a shape of 1e12 elements, far from the file and
with no hint of which field was wrong. Parsing with ``load_json_bytes`` and checking with
``validate`` first turns every such case into one ``SerializationError`` naming the member
and the field path (``steps[3].args[0].entry``), before any backend allocates or maps
anything.

A schema is built from the small classes below (plain data, no code from the file is ever
run)::

    PLAN = Obj({"version": Int(1, 1),
                "steps": List(Obj({"func": Str(), "args": List(Int(0))}), max_items=1 << 20)},
               optional={"baked": Map(Num())})
    validate(obj, PLAN, "artifact 'm.nnvm', member 'executor.json'")

It deliberately stays small (no references, no regex) because core depends on numpy and
pluggy only; a backend that needs cross-field checks (an entry index below the number of
entries) does them after ``validate`` has guaranteed the types.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import SerializationError, format_error

#: deepest nesting a member may have (graph JSON nests subgraphs up to 64 levels, each a few)
MAX_DEPTH = 256
MAX_JSON_BYTES = 256 << 20


def load_json_bytes(data: bytes | str, where: str, max_depth: int = MAX_DEPTH,
                    max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse JSON with a size and nesting limit; NaN/Infinity and invalid UTF-8 refused.

    Raises:
        SerializationError: at ``where``, for any of the above or a syntax error.
    """
    if len(data) > max_bytes:
        raise SerializationError(format_error(where, "is too large to parse",
                                              f"at most {max_bytes} bytes", len(data)))
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        obj = json.loads(text, parse_constant=_no_constant)
    except SerializationError as exc:
        raise SerializationError(f"{where}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise SerializationError(format_error(where, f"is not UTF-8 ({exc.reason} at byte "
                                                     f"{exc.start})")) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise SerializationError(format_error(where, f"is not valid JSON "
                                                     f"({type(exc).__name__}: "
                                                     f"{str(exc)[:160]})")) from None
    depth = _depth(obj)
    if depth > max_depth:
        raise SerializationError(format_error(where, "is nested too deep",
                                              f"at most {max_depth} levels", depth))
    return obj


def _no_constant(name: str):
    raise SerializationError(f"{name} is not valid JSON (NaN and Infinity are refused)")


def _depth(obj: Any) -> int:
    """Nesting depth, iteratively (the object may be deeper than the recursion limit)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in o)
    return deepest


class Spec:
    """Base of the schema node classes: ``check(value, path)`` returns an error or None."""

    def check(self, value: Any, path: str) -> tuple[str, str, str] | None:  # pragma: no cover
        raise NotImplementedError

    @staticmethod
    def _got(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."


class AnyValue(Spec):
    """Anything JSON can hold (still depth-limited by ``load_json_bytes``)."""

    def check(self, value, path):
        return None


class Int(Spec):
    """An int (never a bool) within ``[lo, hi]``."""

    def __init__(self, lo: int | None = None, hi: int | None = None):
        self.lo, self.hi = lo, hi

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"an int in {self.lo}..{self.hi}"
        if self.lo is not None:
            return f"an int >= {self.lo}"
        return "an int" if self.hi is None else f"an int <= {self.hi}"

    def check(self, value, path):
        if not isinstance(value, int) or isinstance(value, bool) or \
                (self.lo is not None and value < self.lo) or \
                (self.hi is not None and value > self.hi):
            return path, self.describe(), self._got(value)
        return None


class Num(Spec):
    """A finite int or float (not a bool)."""

    def check(self, value, path):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                not math.isfinite(value):
            return path, "a finite number", self._got(value)
        return None


class Bool(Spec):
    def check(self, value, path):
        return None if isinstance(value, bool) else (path, "a bool", self._got(value))


class Str(Spec):
    """A string of at most ``max_len`` characters, optionally one of ``choices``."""

    def __init__(self, max_len: int = 4096, choices: tuple | None = None):
        self.max_len, self.choices = max_len, choices

    def check(self, value, path):
        if not isinstance(value, str) or len(value) > self.max_len:
            return path, f"a string of at most {self.max_len} characters", self._got(value)
        if self.choices is not None and value not in self.choices:
            return path, f"one of {list(self.choices)}", self._got(value)
        return None


class Null(Spec):
    def check(self, value, path):
        return None if value is None else (path, "null", self._got(value))


class OneOf(Spec):
    """The first of ``options`` that matches; the error reports every alternative."""

    def __init__(self, *options: Spec):
        self.options = options

    def check(self, value, path):
        errors = [o.check(value, path) for o in self.options]
        if all(e is not None for e in errors):
            deepest = max(errors, key=lambda e: len(e[0]))
            if deepest[0] != path:  # one alternative matched the outer shape: report it
                return deepest
            return path, " or ".join(e[1] for e in errors), self._got(value)
        return None


class List(Spec):
    """A list of ``item`` with a length in ``[min_items, max_items]``."""

    def __init__(self, item: Spec, max_items: int = 1 << 20, min_items: int = 0):
        self.item, self.max_items, self.min_items = item, max_items, min_items

    def check(self, value, path):
        if not isinstance(value, list):
            return path, "a list", self._got(value)
        if not self.min_items <= len(value) <= self.max_items:
            return path, f"a list of {self.min_items}..{self.max_items} items", \
                f"{len(value)} items"
        for i, v in enumerate(value):
            err = self.item.check(v, f"{path}[{i}]")
            if err is not None:
                return err
        return None


class Obj(Spec):
    """A JSON object with ``required`` and ``optional`` fields (others refused unless
    ``extra``)."""

    def __init__(self, required: dict[str, Spec], optional: dict[str, Spec] | None = None,
                 extra: bool = False):
        self.required, self.optional, self.extra = required, optional or {}, extra

    def check(self, value, path):
        if not isinstance(value, dict):
            return path, "an object", self._got(value)
        for key, spec in self.required.items():
            sub = f"{path}.{key}" if path else key
            if key not in value:
                return sub, "present", "nothing"
            err = spec.check(value[key], sub)
            if err is not None:
                return err
        for key, v in value.items():
            if key in self.required:
                continue
            sub = f"{path}.{key}" if path else str(key)
            spec = self.optional.get(key)
            if spec is None:
                if not self.extra:
                    return sub, "no such field", "a value"
                continue
            err = spec.check(v, sub)
            if err is not None:
                return err
        return None


class Map(Spec):
    """An object used as a map: any keys (optionally ``key`` checked), ``value`` values."""

    def __init__(self, value: Spec, key: Spec | None = None, max_items: int = 1 << 20):
        self.value, self.key, self.max_items = value, key, max_items

    def check(self, value, path):
        if not isinstance(value, dict):
            return path, "an object", self._got(value)
        if len(value) > self.max_items:
            return path, f"at most {self.max_items} keys", len(value)
        for k, v in value.items():
            sub = f"{path}[{k!r}]"
            if self.key is not None:
                err = self.key.check(k, sub)
                if err is not None:
                    return sub, f"a key that is {err[1]}", self._got(k)
            err = self.value.check(v, sub)
            if err is not None:
                return err
        return None


class IntKey(Spec):
    """A map key that is a decimal non-negative int below ``hi`` (JSON keys are strings)."""

    def __init__(self, hi: int = 1 << 40):
        self.hi = hi

    def check(self, value, path):
        if not isinstance(value, str) or not value.isdigit() or len(value) > 15 or \
                int(value) >= self.hi:
            return path, f"a decimal int below {self.hi}", self._got(value)
        return None


class Shape(Spec):
    """A tensor shape: at most ``max_ndim`` non-negative ints whose product is at most
    ``max_elements`` (so a declared 1e12-element entry is refused before allocation)."""

    def __init__(self, max_ndim: int = 32, max_elements: int = 1 << 40):
        self.max_ndim, self.max_elements = max_ndim, max_elements

    def check(self, value, path):
        if not isinstance(value, list) or len(value) > self.max_ndim or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
            return path, f"a shape (at most {self.max_ndim} non-negative ints)", \
                self._got(value)
        if math.prod(value) > self.max_elements:
            return path, f"a shape of at most {self.max_elements} elements", \
                f"{math.prod(value)} elements"
        return None


def validate(obj: Any, schema: Spec, where: str) -> None:
    """Check ``obj`` against ``schema``.

    Raises:
        SerializationError: ``where, field 'path': does not match the schema; expected X,
            got Y``.
    """
    err = schema.check(obj, "")
    if err is not None:
        path, expected, got = err
        field = f", field '{path}'" if path else ""
        raise SerializationError(format_error(f"{where}{field}", "does not match its schema",
                                              expected, got,
                                              fix="The file is corrupt or was edited; "
                                                  "re-export it"))
