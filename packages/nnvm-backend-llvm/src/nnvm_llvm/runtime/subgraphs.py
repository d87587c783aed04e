"""Control-flow bodies compiled for ``llvm``: the executor gives each ``if_else`` / ``loop`` /
``scan`` node core's compile-on-first-use runner (``nnvm.runtime.subgraph_runner``, shared
with the host tail of data-dependent graphs, so both compile bodies the same way)."""

from nnvm.runtime.subgraph_runner import SubgraphRunner

__all__ = ["SubgraphRunner"]
