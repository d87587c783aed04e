"""C-like kernel source generation shared by the OpenCL and CUDA backends (pure text).

Pipeline: ``lower.lower_graph`` walks the fused groups (FuseOps' ``group_root`` /
``group_master``), ``templates`` writes the loop nest of a group's heavy op (GEMM, conv,
pooling, reductions, softmax), ``rules`` computes every other member's value at output
coordinates (lowering rules as data, keyed by op name), ``cpu_templates`` holds
register-blocked vector variants of GEMM and convolution for CPU devices,
``builder.KernelBuilder`` collects statements, and a ``renderer.CLikeRenderer`` subclass
spells them in its dialect.
"""

from .builder import GraphInfo, KernelBuilder
from .cpu_templates import CPU_TEMPLATES
from .lower import Step, lower_graph, lower_group, lowerable
from .renderer import CLikeRenderer, Kernel, TensorArg
from .rules import EXPR_RULES, VALUE_RULES
from .templates import TEMPLATES

__all__ = ["CPU_TEMPLATES", "CLikeRenderer", "EXPR_RULES", "GraphInfo", "Kernel",
           "KernelBuilder", "Step", "TEMPLATES", "TensorArg", "VALUE_RULES", "lower_graph",
           "lower_group", "lowerable"]
