"""Converters, one module per ONNX op family; importing a module registers its converters."""

from __future__ import annotations

import importlib

MODULES = ("elementwise", "tensor", "nn", "reduce", "signal", "control_flow", "sequence", "text", "training", "ml", "microsoft")


def register_all() -> None:
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}")
