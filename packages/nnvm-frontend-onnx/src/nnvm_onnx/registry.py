"""The converter table: one converter per (ONNX op type, since_version), picked by opset.

A converter is ``fn(ctx, node) -> list[Value | None]`` (one per ONNX output) registered with
``@converter("Conv", since=1, requires=("conv2d",))``. For a model importing opset N, the
converter with the largest ``since`` <= N is used, as the op's semantics changed only at
those versions. ``requires`` names the NNVM ops the converter emits so that a model whose ops
need a missing core op is reported up front, together with every other unsupported op.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclasses.dataclass(frozen=True)
class Converter:
    op_type: str
    since: int
    fn: Callable
    requires: tuple[str, ...] = ()
    domain: str = ""


_TABLE: dict[tuple[str, str], list[Converter]] = {}


def converter(op_type: str | tuple[str, ...], since: int = 1, requires: tuple[str, ...] = (),
              domain: str = "") -> Callable:
    """Register the decorated function as the converter of ``op_type`` from ``since`` on."""
    types = (op_type,) if isinstance(op_type, str) else op_type

    def wrap(fn: Callable) -> Callable:
        for t in types:
            entries = _TABLE.setdefault((domain, t), [])
            entries.append(Converter(t, since, fn, tuple(requires), domain))
            entries.sort(key=lambda c: c.since)
        return fn
    return wrap


def find_converter(domain: str, op_type: str, opset: int) -> Converter | None:
    """The converter for ``op_type`` at ``opset`` (largest since <= opset), or None."""
    domain = "" if domain in DEFAULT_DOMAINS else domain
    _load_converters()
    best = None
    for c in _TABLE.get((domain, op_type), ()):
        if c.since <= opset:
            best = c
    return best


def supported_op_types(domain: str = "") -> list[str]:
    _load_converters()
    return sorted(t for d, t in _TABLE if d == domain)


_loaded = [False]


def _load_converters() -> None:
    if _loaded[0]:
        return
    _loaded[0] = True
    from .converters import register_all

    register_all()
