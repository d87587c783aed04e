"""NNVM ONNX frontend: ONNX models to NNVM graphs, and an onnx.backend adapter.

``nnvm.frontend.from_onnx(model, shape=None, dtype=None)`` is the public entry point;
``nnvm_onnx.backend.Backend`` runs the ONNX backend test suite.
"""

from __future__ import annotations

__version__ = "0.4.0"


def import_model(*args, **kwargs):
    """See ``nnvm_onnx.importer.import_model``."""
    from .importer import import_model as _impl

    return _impl(*args, **kwargs)


def from_onnx(model, shape=None, dtype=None, **kwargs):
    """Import an ONNX model: returns ``(graph, params)``."""
    return import_model(model, shape=shape, dtype=dtype, **kwargs)
