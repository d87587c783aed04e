"""NNVM CUDA backend: generated CUDA C kernels compiled with NVRTC/nvcc, run through CuPy.

Importing the package does not import CuPy; see ``plugin`` for the availability states.
"""

__version__ = "0.4.0"
