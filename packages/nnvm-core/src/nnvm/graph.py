"""``nnvm.graph``: create a Graph from a Symbol, load graph JSON (NNVM's Python module).

It is also the graph facade: ``Graph.apply``, ``.json()``, ``.ir()`` and ``.symbol`` are
implemented here (the pass manager, the serialiser, the printer, Symbol) and installed into
``nnvm.ir`` on import, so the IR itself imports nothing above the op registry.
"""

from __future__ import annotations

from typing import Sequence

from . import ir as _ir
from .errors import GraphError, format_error
from .ir import Graph, IndexedGraph
from .pass_manager import apply_passes
from .serialization.graph_json import load_json, save_json
from .symbol import Symbol

__all__ = ["Graph", "IndexedGraph", "create", "load_json"]


def symbol_of(graph: Graph) -> Symbol:
    """``graph.symbol``: the graph's outputs as a Symbol (composable again)."""
    return Symbol(graph.outputs)


def ir_text(graph: Graph, join_entry_attrs: Sequence[str] = (),
            join_node_attrs: Sequence[str] = ()) -> str:
    """``graph.ir()``: the PrintGraphIR text form."""
    # Imported on first use: the printer's module also registers the PrintGraphIR pass, and
    # passes load when first asked for, not on ``import nnvm``.
    from .passes.print_graph_ir import print_graph_ir

    return print_graph_ir(graph, join_entry_attrs, join_node_attrs)


_ir.install_facade(apply=apply_passes, json=save_json, ir=ir_text, symbol=symbol_of)


def create(symbol: Symbol) -> Graph:
    """A Graph whose outputs are the symbol's outputs."""
    if not isinstance(symbol, Symbol):
        raise GraphError(format_error(
            "nnvm.graph.create", "not a Symbol", "Symbol", type(symbol).__name__,
            fix="build one with nnvm.sym; read graph JSON with nnvm.graph.load_json"))
    return Graph(symbol.outputs)
