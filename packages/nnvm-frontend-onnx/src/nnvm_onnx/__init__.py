"""NNVM ONNX frontend: ONNX models to NNVM graphs, and an onnx.backend adapter."""

__version__ = "0.1.0"
