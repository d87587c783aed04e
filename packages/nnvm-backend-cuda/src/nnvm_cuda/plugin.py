"""Entry point of the NNVM CUDA backend (group `nnvm`, name `cuda`).

Imports without the backend's heavy dependency. The target is not built yet (issue #7), so
the plugin registers nothing and says so in `nnvm plugins`.
"""

from nnvm import hookimpl


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "CUDA backend (target 'cuda')",
            "available": "the 'cuda' target is not implemented yet (tracked in issue #7)"}
