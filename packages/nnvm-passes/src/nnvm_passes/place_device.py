"""PlaceDevice: assign every node a device and insert copies where values cross devices.

Devices come from three sources, in this order of precedence:

1. *fallback*: an op the main device cannot run (named in ``device_unsupported_ops`` or
   rejected by the predicate ``device_supports(node) -> bool``) runs on ``fallback_device``,
   e.g. an op missing on ``opencl`` runs on ``reference``. Fallback placements do not spread
   to neighbouring ops (only to variables read solely there): the rest stays put.
2. *groups*: a node annotated ``<device_group_attr_key>=group`` (default key
   ``__ctx_group__``) goes to ``device_assign_map[group]``; unannotated op nodes inherit the
   device of their first placed input (NNVM's rule), then a reverse sweep gives unplaced
   inputs (variables) the device of a consumer.
3. ``device_default`` (default 0, NNVM's) for anything left.

When more than one device is used, each value read on another device than its producer's is
routed through one ``device_copy`` node per (entry, destination) (``<name>_<idx>_copy_<dev>``,
op configurable with ``device_copy_op``). A mutated input may not cross devices.

Provides ``device`` (per node of the new graph) and ``num_device_copies``; ``shape``,
``dtype`` and ``layout`` are carried over to the copies, a memory plan is dropped (re-run
PlanMemory, which then pools buffers per device).
"""

from __future__ import annotations

from typing import Any, Callable

from nnvm.errors import AttrError, GraphError, format_error, node_where
from nnvm import graph_attrs
from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph, Node, NodeEntry, make_node
from nnvm.pass_manager import PassSet

PASSES = PassSet()

#: Per-entry attributes whose value a copy shares with its source entry.
_CARRIED_ENTRY_ATTRS = ("shape", "dtype", "layout")


@PASSES.define("PlaceDevice", provides=("device", "num_device_copies"), invalidates=DERIVED)
def place_device(graph: Graph) -> Graph:
    """Per-node device from ``device_group_attr_key``/``device_assign_map`` annotations or
    ``fallback_device`` for ops the target cannot run (``device_unsupported_ops`` or the
    ``device_supports`` predicate); inserts ``device_copy`` nodes at device boundaries.
    """
    idx = graph.index
    devices = _assign(graph)
    used = set(devices)
    if len(used) <= 1:
        return graph.with_attrs(device=devices, num_device_copies=0)
    copy_op = graph.attrs.get("device_copy_op", "device_copy")
    new_nodes: list[Node] = []
    copies: dict[tuple[int, int, Any], NodeEntry] = {}
    copy_source: dict[int, int] = {}  # id(copy node) -> old entry id
    new_device: dict[int, Any] = {}
    origin: dict[int, int] = {}  # id(new node) -> old node id
    for nid, node in enumerate(idx.nodes):
        origin[id(node)] = nid
        if node.op is None:
            new_nodes.append(node)
            new_device[id(node)] = devices[nid]
            continue
        f = node.op.get_attr("FMutateInputs")
        mutated = set(f(node.attrs)) if f is not None else set()
        inputs = []
        for slot, ((src, k, ver), e) in enumerate(zip(idx.inputs[nid], node.inputs)):
            entry = NodeEntry(new_nodes[src], k, ver)
            dev = devices[nid]
            if devices[src] != dev:
                if slot in mutated:
                    raise GraphError(format_error(
                        node_where(node), f"mutates input {slot} ('{e.node.name}') that lives "
                        f"on another device", devices[src], dev,
                        fix="Place the mutating op on the device of the variable"))
                key = (src, k, dev)
                if key not in copies:
                    attrs = {"dst_device": str(dev)} if copy_op == "device_copy" else {}
                    c = make_node(copy_op, [entry], attrs,
                                  name=f"{idx.nodes[src].name}_{k}_copy_{dev}")
                    copies[key] = NodeEntry(c, 0, 0)
                    copy_source[id(c)] = idx.entry_id(src, k)
                    new_device[id(c)] = dev
                entry = copies[key]
            inputs.append(entry)
        deps = [new_nodes[c] for c in idx.control_deps[nid]]
        if all(a.node is b.node for a, b in zip(inputs, node.inputs)) and \
                all(a is b for a, b in zip(deps, node.control_deps)):
            new = node
        else:
            new = Node(node.op, node.name, node.attrs, inputs, deps, node.subgraphs)
            new.info = node.info
        new_nodes.append(new)
        new_device[id(new)] = devices[nid]
        origin[id(new)] = nid
    outputs = [NodeEntry(new_nodes[n], i, v) for n, i, v in idx.outputs]
    stale = graph_attrs.derived()  # the carried ones are re-indexed just below
    attrs = {k: v for k, v in graph.attrs.items() if k not in stale}
    out = Graph(outputs, attrs)
    out.attrs.update(_carry_entry_attrs(graph, out, copy_source, origin))
    out.attrs["device"] = [new_device[id(n)] for n in out.index.nodes]
    out.attrs["num_device_copies"] = len(copies)
    return out


def _assign(graph: Graph) -> list[Any]:
    idx = graph.index
    key = graph.attrs.get("device_group_attr_key", "__ctx_group__")
    assign_map = dict(graph.attrs.get("device_assign_map") or {})
    default = graph.attrs.get("device_default", 0)
    fallback = graph.attrs.get("fallback_device")
    unsupported = _unsupported_predicate(graph)
    devices: list[Any] = [None] * idx.num_nodes
    pinned = [False] * idx.num_nodes
    for nid, node in enumerate(idx.nodes):
        if fallback is not None and node.op is not None and unsupported(node):
            devices[nid], pinned[nid] = fallback, True
            continue
        group = node.attrs.get(key)
        if group is None:
            continue
        if group not in assign_map:
            raise AttrError(format_error(
                node_where(node), f"device group '{group}' is not in device_assign_map",
                fix=f"Known groups: {', '.join(map(str, assign_map)) or '(none)'}; add "
                    f"device_assign_map={{'{group}': <device>}}"))
        devices[nid] = assign_map[group]
    for nid, node in enumerate(idx.nodes):  # forward: inherit from the first placed input
        if devices[nid] is not None or node.op is None:
            continue
        if node.op.get_attr("TIsBackward") and idx.control_deps[nid]:
            src = idx.control_deps[nid][0]
            devices[nid] = devices[src] if not pinned[src] else None
        if devices[nid] is None:
            devices[nid] = next((devices[s] for s, _, _ in idx.inputs[nid]
                                 if devices[s] is not None and not pinned[s]), None)
    for nid in reversed(range(idx.num_nodes)):  # backward: unplaced inputs follow a consumer
        if devices[nid] is None:
            continue
        for src, _, _ in idx.inputs[nid]:
            if devices[src] is None and (not pinned[nid] or idx.nodes[src].op is None):
                devices[src] = devices[nid]
    return [default if d is None else d for d in devices]


def _unsupported_predicate(graph: Graph) -> Callable[[Node], bool]:
    names = set(graph.attrs.get("device_unsupported_ops") or ())
    supports = graph.attrs.get("device_supports")
    if supports is not None and not callable(supports):
        raise AttrError(format_error("pass 'PlaceDevice': device_supports", "is not callable",
                                     "f(node) -> bool", type(supports).__name__))
    return lambda n: n.op.name in names or (supports is not None and not supports(n))


def _carry_entry_attrs(old: Graph, new: Graph, copy_source: dict[int, int],
                       origin: dict[int, int]) -> dict:
    old_idx, new_idx = old.index, new.index
    out = {}
    for key in _CARRIED_ENTRY_ATTRS:
        vals = old.attrs.get(key)
        if not isinstance(vals, list) or len(vals) != old_idx.num_node_entries:
            continue
        remapped = []
        for nid, node in enumerate(new_idx.nodes):
            if id(node) in copy_source:
                remapped.append(vals[copy_source[id(node)]])
                continue
            base = old_idx.entry_rptr[origin[id(node)]]
            remapped.extend(vals[base:base + node.num_outputs])
        out[key] = remapped
    return out

