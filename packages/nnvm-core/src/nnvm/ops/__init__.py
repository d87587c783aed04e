"""The standard operator set, one module per family. Each module builds its records in
``defs`` (an ``nnvm.op.OpSet``) and registers nothing. Core's own plugin
(``nnvm/_builtin.py``) returns one ``LazyOpFamily`` per family from its ``nnvm_ops`` hook, so a
family module is imported only when one of its ops is first looked up: the generated index
``_index.py`` (``python -m nnvm.ops._make_index``) says which family defines which op.
"""

from __future__ import annotations

#: Op families in definition order: where two define an op with ``op_once``, the earlier one
#: wins (later families' gradients use earlier ops by name, resolved when they run).
FAMILIES = ("elemwise", "nn", "reduce", "transform", "system", "math", "indexing", "layout", "norm", "nn_nd", "image", "sequence", "control_flow", "vision", "quantize", "onnx_extra", "text", "ml", "dynamic_shape")


def lazy_families() -> list:
    """One ``LazyOpFamily`` per family, in family order, from the generated index (imports
    no family module)."""
    from ..op import LazyOpFamily
    from ._index import INDEX, KEYSETS

    return [LazyOpFamily(f"{__name__}.{family}:defs",
                         {op: KEYSETS[i] for op, i in ops.items()}, aliases)
            for family, (ops, aliases) in INDEX.items()]

