"""Entry point of the NNVM OpenCL backend (group `nnvm`, name `opencl`).

Imports without the backend's heavy dependency. The target is not built yet (issue #6), so
the plugin registers nothing and says so in `nnvm plugins`.
"""

from nnvm import hookimpl


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "OpenCL backend (target 'opencl')",
            "available": "the 'opencl' target is not implemented yet (tracked in issue #6)"}
