"""The standard operator set, one module per family. Importing a module registers its ops.

Core registers these through its own plugin hook (``nnvm/_builtin.py``), like any plugin.
"""

from __future__ import annotations

import importlib

#: Op families in registration order (later families may use earlier ops in gradients).
FAMILIES = ("elemwise", "nn", "reduce", "transform", "system", "math", "indexing", "layout", "norm", "nn_nd", "image", "sequence", "control_flow", "vision", "quantize", "onnx_extra", "text", "ml")


def register_all() -> None:
    for family in FAMILIES:
        importlib.import_module(f"{__name__}.{family}")
