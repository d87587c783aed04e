"""``nnvm.graph``: create a Graph from a Symbol, load graph JSON (NNVM's Python module)."""

from __future__ import annotations

from .ir import Graph, IndexedGraph
from .serialization.graph_json import load_json
from .symbol import Symbol

__all__ = ["Graph", "IndexedGraph", "create", "load_json"]


def create(symbol: Symbol) -> Graph:
    """A Graph whose outputs are the symbol's outputs."""
    if not isinstance(symbol, Symbol):
        from .errors import GraphError

        raise GraphError(f"graph.create: expected a Symbol; got {type(symbol).__name__}")
    return Graph(symbol.outputs)
