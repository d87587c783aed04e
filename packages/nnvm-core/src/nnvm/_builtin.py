"""Core's own plugin: the standard ops, the generic passes and the ``reference`` target.

Registered through the same hooks as any third-party plugin (dogfooding), so the plugin
machinery is exercised on every import.
"""

from __future__ import annotations

from .hookspecs import hookimpl


@hookimpl
def nnvm_register_ops(registry) -> None:
    from . import ops

    ops.register_all()


@hookimpl
def nnvm_register_passes(registry) -> None:
    from .passes import infer_shape, infer_type, print_graph_ir  # noqa: F401 - registers

    registry.register_pipeline("default", ["InferShape", "InferType"], plevel=0)


@hookimpl
def nnvm_register_backends() -> list:
    from .backends.reference import ReferenceBackend

    return [ReferenceBackend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "core: IR, standard ops, InferShape/InferType/PrintGraphIR, "
                       "reference target"}
