"""Entry point of the NNVM OpenCL backend (group ``nnvm``, name ``opencl``).

Imports without pyopencl: availability is a reason string such as
``"pyopencl not importable: pip install nnvm-backend-opencl[intel]"``.
"""

from nnvm import hookimpl

from .backend import OpenCLBackend
from . import device as devices


@hookimpl
def nnvm_targets() -> list:
    return [OpenCLBackend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    why = devices.unavailable_reason()
    if why is not None:
        return {"summary": "OpenCL backend (target 'opencl')", "available": why}
    return {"summary": f"OpenCL backend (target 'opencl'): {devices.describe()}"}
