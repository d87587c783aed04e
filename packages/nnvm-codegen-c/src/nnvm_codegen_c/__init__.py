"""C-like kernel source generation shared by the OpenCL and CUDA backends (pure text).

A library, not a plugin: it has no ``nnvm`` entry point and registers nothing; the backends
that emit C-like kernels (nnvm-backend-opencl, nnvm-backend-cuda) import it. It depends on
nnvm-core only and reads the ops through their public geometry helpers (``nnvm.ops.nn``,
``nnvm.ops.transform``, ...), so a kernel pads, slices and resizes exactly as the reference
kernel does.

Pipeline: ``lower.lower_graph`` walks the fused groups (FuseOps' ``group_root`` /
``group_master``), ``templates`` writes the loop nest of a group's heavy op (GEMM, conv,
pooling, reductions, softmax), ``rules`` computes every other member's value at output
coordinates (lowering rules as data, keyed by op name), ``builder.KernelBuilder`` collects
statements, and a ``renderer.CLikeRenderer`` subclass spells them in its dialect (and may
offer device-specific template variants through ``CLikeRenderer.template_variant``).
``arena`` plans one device memory arena per graph; ``diagnostics`` maps compiler log lines
back to kernels.
"""

from .builder import GraphInfo, KernelBuilder
from .lower import Step, lower_graph, lower_group, lowerable
from .renderer import CLikeRenderer, Kernel, TensorArg
from .rules import EXPR_RULES, VALUE_RULES
from .templates import TEMPLATES

__version__ = "0.4.0"

__all__ = ["CLikeRenderer", "EXPR_RULES", "GraphInfo", "Kernel", "KernelBuilder", "Step",
           "TEMPLATES", "TensorArg", "VALUE_RULES", "lower_graph", "lower_group", "lowerable"]
