"""NNVM OpenCL backend: generated OpenCL C kernels run through PyOpenCL."""

__version__ = "0.4.0"
