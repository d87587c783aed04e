"""NNVM: a modular graph IR stack for deep learning.

Core (this package) holds the IR, the operator registry, pass infrastructure, plugin hooks,
serialisation, the NumPy reference target and the runtime. Frontends, optimisation passes and
backends are separate packages found through the ``nnvm`` entry-point group.
"""

from __future__ import annotations

__version__ = "0.4.0"

from . import attribute, compiler, frontend, graph, name, op, runtime, symbol  # noqa: E402
from .errors import NNVMError  # noqa: E402
from .hookspecs import hookimpl  # noqa: E402
from .ir import Graph, Node, NodeEntry  # noqa: E402
from .plugin_manager import plugins  # noqa: E402
from .runtime.graph_runtime import cl, cpu, cuda, gpu, opencl  # noqa: E402
from .session import InferenceSession, NodeArg  # noqa: E402

sym = symbol

__all__ = ["InferenceSession", "NNVMError", "NodeArg", "Graph", "Node", "NodeEntry", "attribute", "cl", "compiler", "cpu",
           "cuda", "frontend", "gpu", "graph", "hookimpl", "name", "op", "opencl", "plugins",
           "runtime", "sym", "symbol", "__version__"]
