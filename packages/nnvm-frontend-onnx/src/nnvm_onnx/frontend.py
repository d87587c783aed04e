"""The ``onnx`` frontend record that ``nnvm.frontend.from_onnx`` and ``for_path`` resolve to."""

from __future__ import annotations

from typing import Any


class OnnxFrontend:
    """ONNX models (``.onnx``) -> ``(graph, params)``."""

    name = "onnx"
    extensions = (".onnx",)

    def is_available(self) -> str | None:
        try:
            import onnx  # noqa: F401
        except ImportError as exc:
            return f"onnx not importable ({exc}): pip install nnvm-frontend-onnx"
        return None

    def load(self, model: Any, shape: dict | None = None, dtype: Any = None,
             **kw: Any) -> tuple:
        """Import ``model`` (path, bytes or ModelProto); see ``nnvm_onnx.import_model``."""
        from .importer import import_model

        return import_model(model, shape=shape, dtype=dtype, **kw)
