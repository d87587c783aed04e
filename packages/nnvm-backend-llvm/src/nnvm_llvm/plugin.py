"""Entry point of the NNVM LLVM backend (group `nnvm`, name `llvm`).

Imports without the backend's heavy dependency. The target is not built yet (issue #5), so
the plugin registers nothing and says so in `nnvm plugins`.
"""

from nnvm import hookimpl


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "LLVM backend (target 'llvm')",
            "available": "the 'llvm' target is not implemented yet (tracked in issue #5)"}
