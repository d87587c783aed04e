"""NNVM CUDA backend: generated CUDA C kernels compiled with NVRTC/nvcc, run through CuPy."""

__version__ = "0.1.0"
