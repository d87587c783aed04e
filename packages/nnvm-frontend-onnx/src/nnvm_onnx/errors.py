"""Errors of the ONNX importer: every one an ``NNVMError`` that names the ONNX node.

``NeedsConstantError`` is special: it says an input that the importer must know at compile time
(a Reshape target, Slice bounds, a TopK ``k``...) is computed from graph inputs. The
``onnx.backend`` adapter catches it and re-imports with those inputs frozen to their values.
"""

from __future__ import annotations

from nnvm.errors import GraphError, NNVMError, UnsupportedOpError, format_error


class OnnxImportError(NNVMError, ValueError):
    """The ONNX model is malformed, inconsistent, or cannot be imported as given."""


class OnnxUnsupportedError(UnsupportedOpError):
    """The model uses ops (or op versions, or dtypes) the importer has no converter for."""


class NeedsConstantError(OnnxImportError):
    """A value that must be static at import time depends on graph inputs.

    Attributes:
        inputs: names of the graph inputs whose *values* the static value depends on.
        symbolic: ``(input, axis, dim_name)`` for symbolic dims whose sizes it depends on.
    """

    def __init__(self, message: str, inputs=(), symbolic=()):
        super().__init__(message)
        self.inputs = tuple(inputs)
        self.symbolic = tuple(symbolic)


def onnx_where(node) -> str:
    """Describe an ONNX node for messages: ``ONNX node 'conv1' (Conv)``."""
    name = node.name or (node.output[0] if len(node.output) else "?")
    return f"ONNX node '{name}' ({node.op_type})"


__all__ = ["GraphError", "NNVMError", "NeedsConstantError", "OnnxImportError",
           "OnnxUnsupportedError", "format_error", "onnx_where"]
