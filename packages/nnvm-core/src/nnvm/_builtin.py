"""Core's own plugin: the standard ops, the generic passes and the ``reference`` target.

Returned through the same hooks as any third-party plugin (dogfooding), so the plugin
machinery is exercised on every import.
"""

from __future__ import annotations

from .hookspecs import hookimpl


@hookimpl
def nnvm_ops() -> list:
    """One ``LazyOpFamily`` per standard family: a family module is imported when one of its
    ops is first looked up, so a 3-op graph does not pay for the text or ML families."""
    from . import ops

    return ops.lazy_families()


@hookimpl
def nnvm_passes() -> list:
    from .pass_manager import PipelineDef
    from .passes import infer_shape, infer_type, print_graph_ir

    return [*infer_shape.PASSES, *infer_type.PASSES, *print_graph_ir.PASSES,
            PipelineDef("default", ("InferShape", "InferType"), plevel=0)]


@hookimpl
def nnvm_targets() -> list:
    from .backends.reference import ReferenceBackend

    return [ReferenceBackend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "core: IR, standard ops, InferShape/InferType/PrintGraphIR, "
                       "reference target"}
