"""Entry point of the NNVM ONNX frontend (group `nnvm`, name `onnx`).

The importer is not built yet (issue #3), so the plugin registers nothing and says so.
"""

from nnvm import hookimpl


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "ONNX frontend (nnvm.frontend.from_onnx)",
            "available": "the ONNX importer is not implemented yet (tracked in issue #3)"}
