"""The standard operator set, one module per family. Each module builds its records in
``defs`` (an ``nnvm.op.OpSet``) and registers nothing; core's own plugin returns them all
from its ``nnvm_ops`` hook (``nnvm/_builtin.py``), like any plugin.
"""

from __future__ import annotations

import importlib

#: Op families in definition order (later families may use earlier ops in gradients).
FAMILIES = ("elemwise", "nn", "reduce", "transform", "system", "math", "indexing", "layout", "norm", "nn_nd", "image", "sequence", "control_flow", "vision", "quantize", "onnx_extra", "text", "ml", "dynamic_shape")

#: ops a family defines with ``op_once`` that an earlier family already defined (the earlier
#: record wins; the standard families were written in parallel); kept for reports
SHADOWED: list[str] = []


def records() -> list:
    """Every family's records, in family order, without the shadowed ``op_once`` ones."""
    out, seen = [], set()
    SHADOWED.clear()
    for family in FAMILIES:
        defs = importlib.import_module(f"{__name__}.{family}").defs
        for record in defs:
            name = getattr(record, "name", None)
            if name in seen and name in defs.once:
                SHADOWED.append(name)
                continue
            seen.add(name)
            out.append(record)
    return out
