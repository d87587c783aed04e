"""The engine behind InferShape and InferType: forward and backward sweeps to a fixed point.

As in NNVM's ``InferAttr``, each op's rule sees the known values of its inputs *and* outputs
and may fill either side, so a dense layer's weight shape follows from its data shape and
``units``. Sweeps alternate direction until no entry changes.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import NNVMError, format_error, node_where
from ..ir import Graph


def infer_attr(graph: Graph, *, name: str, inputs_key: str, var_key: str,
               legacy_var_key: str, rule_key: str, default_rule: Callable | None,
               normalize: Callable[[Any, str], Any], error_cls: type[NNVMError],
               check: Callable[[Any, str], None] | None = None) -> Graph:
    """Infer one per-entry attribute (``shape`` or ``dtype``) over the whole graph.

    Returns a graph with ``name`` (list per entry, None = unknown) and
    ``<name>_num_unknown_nodes`` set.
    """
    idx = graph.index
    rptr = idx.entry_rptr
    vals: list[Any] = list(graph.attrs.get(name) or [None] * idx.num_node_entries)
    if len(vals) != idx.num_node_entries:
        vals = [None] * idx.num_node_entries
    given = graph.attrs.get(inputs_key) or {}
    if not isinstance(given, dict):  # NNVM style: a list over input_nodes
        given = dict(zip(idx.input_names, given))
    known_inputs = set(idx.input_names)
    for key in given:
        if key not in known_inputs:
            raise error_cls(format_error(
                f"{name} input '{key}'", "names no input of the graph",
                fix=f"Graph inputs: {', '.join(idx.input_names)}"))
    for nid in idx.input_nodes:
        node = idx.nodes[nid]
        v = given.get(node.name)
        if v is None:
            v = node.attrs.get(var_key, node.attrs.get(legacy_var_key))
        if v is not None:
            vals[rptr[nid]] = normalize(v, f"input '{node.name}'")

    # Precompute each op node's rule and entry ids once: sweeps revisit every node.
    plan = []
    for nid, node in enumerate(idx.nodes):
        rule = None if node.op is None else (node.op.get_attr(rule_key) or default_rule)
        if rule is not None:
            plan.append((nid, node, rule, [rptr[i] + k for i, k, _ in idx.inputs[nid]],
                         list(range(rptr[nid], rptr[nid + 1]))))

    def visit(step) -> bool:
        nid, node, rule, in_eids, out_eids = step
        ins = [vals[e] for e in in_eids]
        outs = [vals[e] for e in out_eids]
        if None not in ins and None not in outs:
            return False
        try:
            new_ins, new_outs = rule(node.attrs, list(ins), list(outs))
        except NNVMError as exc:
            raise error_cls(f"{node_where(node)}: {exc}") from None
        except Exception as exc:  # a plugin's rule crashed: say where
            raise error_cls(format_error(node_where(node), f"{rule_key} failed: {exc!r}",
                                         fix=f"inputs {ins}")) from exc
        changed = False
        for eids, old, new, side in ((in_eids, ins, new_ins, "input"),
                                     (out_eids, outs, new_outs, "output")):
            for k, (e, a, b) in enumerate(zip(eids, old, new)):
                if b is None or a == b:
                    continue
                if check is not None:
                    check(b, f"{node_where(node)}, {side} '{_label(node, side, k)}'")
                if a is not None:
                    label = _label(node, side, k)
                    raise error_cls(format_error(
                        node_where(node), f"{side} '{label}' {name} conflict", a, b,
                        fix=f"Check the {name} given for the graph inputs"))
                vals[e] = b
                changed = True
        return changed

    forward = True
    while True:
        changed = False
        for step in (plan if forward else reversed(plan)):
            changed |= visit(step)
        if not changed and not forward:
            break
        forward = not forward
    unknown = sum(1 for nid in range(idx.num_nodes)
                  if any(vals[e] is None for e in range(rptr[nid], rptr[nid + 1])))
    return graph.with_attrs(**{name: vals, f"{name}_num_unknown_nodes": unknown})


def _label(node, side: str, k: int) -> str:
    try:
        names = node.op.input_names(node.attrs) if side == "input" else \
            node.op.output_names(node.attrs)
        return names[k]
    except Exception:  # noqa: BLE001 - best effort for the message
        return str(k)


def first_unknown(graph: Graph, name: str) -> str | None:
    """Describe the first node with an unknown ``name`` value, for error messages."""
    idx = graph.index
    vals = graph.attrs.get(name) or []
    for nid, node in enumerate(idx.nodes):
        for e in range(idx.entry_rptr[nid], idx.entry_rptr[nid + 1]):
            if e >= len(vals) or vals[e] is None:
                return node_where(node)
    return None
