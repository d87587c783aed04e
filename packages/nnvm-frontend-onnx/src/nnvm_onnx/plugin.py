"""Entry point of the NNVM ONNX frontend (group ``nnvm``, name ``onnx``).

Imports without onnx installed: the frontend then reports why it is unavailable.
"""

from __future__ import annotations

from nnvm import hookimpl


@hookimpl
def nnvm_register_frontends() -> list:
    from .frontend import OnnxFrontend

    return [OnnxFrontend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "ONNX frontend (nnvm.frontend.from_onnx) and onnx.backend adapter"}
