"""The one table of graph attributes: each name declared once, with its kind.

Passes talk through graph attributes. Some hold one value per node entry (``shape``) or per
node (``device``) and are indexed by ``graph.index``: they are *derived* from the nodes and go
stale the moment a pass rewrites them. Others describe the graph as a whole (``params``,
``layout_inputs``); a few graph-level values are themselves summaries of derived ones
(``num_groups``) and go stale with them. The pass manager (which drops what a pass
invalidates), ``rewrite.with_outputs`` and the graph JSON loader all read this table, so a
new attribute is declared here (or by a plugin through ``declare``) and nowhere else.
"""

from __future__ import annotations

import dataclasses

from .errors import NNVMError, format_error

ENTRY, NODE, GRAPH = "entry", "node", "graph"
#: ``invalidates=DERIVED``: every attribute derived from the nodes (what ``change_graph=True``
#: means), resolved when the pass runs, so attributes declared later by plugins are included.
DERIVED = "derived"


@dataclasses.dataclass(frozen=True)
class GraphAttr:
    """A declared graph attribute.

    Attributes:
        name: the key in ``graph.attrs``.
        kind: ``entry`` (a list indexed by entry id), ``node`` (a list indexed by node id) or
            ``graph`` (one value).
        derived: computed from the nodes, so stale once they change (always true for
            ``entry``/``node`` kinds; true for graph-level summaries such as ``num_groups``).
        doc: one line for docs and error messages.
    """

    name: str
    kind: str
    derived: bool
    doc: str


_TABLE: dict[str, GraphAttr] = {}


def declare(name: str, kind: str, doc: str, derived: bool | None = None) -> GraphAttr:
    """Declare a graph attribute (plugins call this for their own); re-declaring the same
    kind is a no-op, a different kind an error."""
    if kind not in (ENTRY, NODE, GRAPH):
        raise NNVMError(format_error(f"graph attribute '{name}'", "has an unknown kind",
                                     f"{ENTRY!r}, {NODE!r} or {GRAPH!r}", repr(kind)))
    attr = GraphAttr(name, kind, bool(derived) or kind != GRAPH, doc)
    old = _TABLE.get(name)
    if old is not None and (old.kind, old.derived) != (attr.kind, attr.derived):
        raise NNVMError(format_error(f"graph attribute '{name}'", "is already declared",
                                     f"kind {old.kind}", f"kind {kind}",
                                     fix="Use another name for a different attribute"))
    _TABLE.setdefault(name, attr)
    return _TABLE[name]


def get(name: str) -> GraphAttr:
    """The declaration of ``name``; an undeclared name counts as a graph-level input."""
    return _TABLE.get(name) or GraphAttr(name, GRAPH, False, "")


def table() -> dict[str, GraphAttr]:
    return dict(_TABLE)


def derived() -> frozenset[str]:
    """Names that go stale when a pass rewrites nodes."""
    return frozenset(a.name for a in _TABLE.values() if a.derived)


def of_kind(kind: str) -> frozenset[str]:
    return frozenset(a.name for a in _TABLE.values() if a.kind == kind)


def is_stale(name: str, value, num_entries: int, num_nodes: int) -> bool:
    """Whether a per-entry/per-node value no longer fits the graph (an undeclared rewrite)."""
    kind = get(name).kind
    want = num_entries if kind == ENTRY else num_nodes if kind == NODE else None
    return want is not None and (not isinstance(value, (list, tuple)) or len(value) != want)


#: Core's attributes (name, kind, derived, doc); plugins add theirs with ``declare``.
_CORE = (
    ("shape", ENTRY, True, "inferred shape (None = unknown)"),
    ("dtype", ENTRY, True, "inferred dtype name"),
    ("layout", ENTRY, True, "data layout string (CorrectLayout)"),
    ("storage_id", ENTRY, True, "memory-plan storage slot (-1: not planned)"),
    ("storage_inplace_index", ENTRY, True, "input slot an output shares storage with"),
    ("device", NODE, True, "device group of each node (PlaceDevice)"),
    ("group_root", NODE, True, "root node of each node's fused group (FuseOps)"),
    ("group_master", NODE, True, "master node of each node's fused group (FuseOps)"),
    ("pattern", NODE, True, "fused pattern of each node's group (FuseOps)"),
    ("shape_num_unknown_nodes", GRAPH, True, "nodes with an unknown shape"),
    ("dtype_num_unknown_nodes", GRAPH, True, "nodes with an unknown dtype"),
    ("storage_allocated_bytes", GRAPH, True, "bytes the memory plan allocates"),
    ("storage_num_not_allocated", GRAPH, True, "entries the memory plan left unplanned"),
    ("num_groups", GRAPH, True, "number of fused groups (FuseOps)"),
    ("num_mutation_deps", GRAPH, True, "control deps OrderMutation added"),
    ("num_device_copies", GRAPH, True, "device copies PlaceDevice inserted"),
    ("graphir", GRAPH, True, "printed IR (PrintGraphIR)"),
    ("dynamic_shape", GRAPH, True, "some shapes depend on data"),
    ("grad_num_mirrored", GRAPH, True, "nodes recomputed in the backward pass"),
    ("grad_checkpoints", GRAPH, True, "entries kept for the backward pass"),
    ("params", GRAPH, False, "constant inputs {name: array}"),
    ("shape_inputs", GRAPH, False, "{input: shape}"),
    ("dtype_inputs", GRAPH, False, "{input: dtype}"),
    ("layout_inputs", GRAPH, False, "{input: layout} or one layout (build(layout=))"),
    ("opt_level", GRAPH, False, "build opt_level"),
    ("input_defaults", GRAPH, False, "names of overridable initializers"),
    ("grad_ys", GRAPH, False, "Gradient: outputs to differentiate"),
    ("grad_xs", GRAPH, False, "Gradient: inputs to differentiate with respect to"),
    ("join_entry_attrs", GRAPH, False, "PrintGraphIR: per-entry attributes to print"),
    ("join_node_attrs", GRAPH, False, "PrintGraphIR: per-node attributes to print"),
)
for _name, _kind, _derived, _doc in _CORE:
    declare(_name, _kind, _doc, _derived)
