"""CorrectLayout: make every op see its inputs in the layout it expects, with as few
``__layout_transform__`` nodes as possible, and record each entry's layout.

Three steps. (1) Insert: walking in topological order, an input whose known layout differs
from what its consumer expects (``FCorrectLayout``, or the ``layout``/``kernel_layout``
attributes of conv2d and pooling ops) gets a transform; graph inputs' layouts come from the
graph attribute ``layout_inputs`` ({name: layout}, set by ``build(layout=...)``). (2) Sink and
cancel, by the rule table ``RULES``: transforms move below layout-agnostic elementwise ops
(a constant operand is transformed instead, and PrecomputePrune folds that), and a transform
meeting its inverse disappears. (3) Provide ``layout``: one string per entry, None = unknown.
"""

from __future__ import annotations

from nnvm.errors import NNVMError
from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph, Node, NodeEntry, node_map
from nnvm.op import OpPattern
from nnvm.ops.common import op
from nnvm.pass_manager import PassSet
from nnvm.rewrite import P, Match, Rule, X, ensure_inferred, rewrite, with_outputs

from .alter_op_layout import layout_transform

PASSES = PassSet()

_T = "__layout_transform__"
_LAYOUT_OPS_INPUTS = ("layout", "kernel_layout")
_LAYOUT_SENSITIVE_ATTRS = {"axis", "axes", "shape", "layout", "begin", "end"}


def expected_layouts(node: Node, in_layouts: list) -> tuple[list, list]:
    """(input layouts the op needs, its output layouts); None = any/unknown."""
    rule = node.op.get_attr("FCorrectLayout")
    if rule is not None:
        return rule(node.attrs, list(in_layouts), [None] * node.num_outputs)
    if "layout" in node.attrs and isinstance(node.attrs["layout"], str):
        ins = [node.attrs.get(k) for k in _LAYOUT_OPS_INPUTS][:len(in_layouts)]
        ins += [None] * (len(in_layouts) - len(ins))
        out = node.attrs.get("out_layout", "__undef__")
        return ins, [node.attrs["layout"] if out in ("__undef__", "") else out] * \
            node.num_outputs
    if node.op.get_attr("TOpPattern", OpPattern.OPAQUE) <= OpPattern.BROADCAST:
        first = next((lay for lay in in_layouts if lay is not None), None)
        return [None] * len(in_layouts), [first] * node.num_outputs
    return [None] * len(in_layouts), [None] * node.num_outputs


def node_map_default(node: Node, inputs: list[NodeEntry]) -> Node:
    """The node itself when its inputs are unchanged, else a copy reading ``inputs``."""
    if all(a.node is b.node and a.index == b.index for a, b in zip(inputs, node.inputs)):
        return node
    new = Node(node.op, node.name, node.attrs, inputs, node.control_deps, node.subgraphs)
    new.info = node.info
    return new


def _insert_transforms(graph: Graph) -> tuple[list[NodeEntry], dict]:
    given = graph.attrs.get("layout_inputs") or {}
    if isinstance(given, str):
        given = {n: given for n in graph.index.input_names if n not in
                 (graph.attrs.get("params") or {})}
    layouts: dict[tuple[int, int], str | None] = {}

    def visit(node: Node, inputs: list[NodeEntry]):
        if node.op is None:
            layouts[(id(node), 0)] = given.get(node.name)
            return None
        have = [layouts.get((id(e.node), e.index)) for e in inputs]
        want, _ = expected_layouts(node, have)
        fixed = [layout_transform(e, h, w) if h and w and h != w else e
                 for e, h, w in zip(inputs, have, want)]
        if all(a is b for a, b in zip(fixed, inputs)):
            new = node_map_default(node, inputs)
        else:
            new = Node(node.op, node.name, node.attrs, fixed, node.control_deps, node.subgraphs)
        _, outs = expected_layouts(new, [w or h for h, w in zip(have, want)])
        for k, lay in enumerate(outs):
            layouts[(id(new), k)] = lay
        return new

    return node_map(graph, visit), layouts


def _compose(m: Match) -> NodeEntry:
    src, dst = m.attrs("inner")["src_layout"], m.root.attrs["dst_layout"]
    return layout_transform(m["x"], src, dst)


def _agnostic(node: Node) -> bool:
    """Elementwise/broadcast ops with no axis- or shape-valued attribute commute with any
    relayout of all their operands."""
    return node.op.get_attr("TOpPattern", OpPattern.OPAQUE) <= OpPattern.BROADCAST and \
        node.num_outputs == 1 and not _LAYOUT_SENSITIVE_ATTRS & set(node.attrs)


def _sink(m: Match) -> NodeEntry | None:
    """``f(T(x), T(y) | const)`` -> ``T(f(x, y'))`` for an elementwise/broadcast ``f``."""
    node = m.root
    if node.op is None or not _agnostic(node):
        return None
    ts = [e for e in node.inputs if e.node.op is not None and e.node.op.name == _T]
    if not ts:
        return None
    src, dst = ts[0].node.attrs["src_layout"], ts[0].node.attrs["dst_layout"]
    rank = len(m.shape(ts[0]) or ())
    new_inputs = []
    for e in node.inputs:
        if e.node.op is not None and e.node.op.name == _T and \
                (e.node.attrs["src_layout"], e.node.attrs["dst_layout"]) == (src, dst):
            new_inputs.append(e.node.inputs[0])
        elif m.is_constant(e) and m.shape(e) is not None and 0 < len(m.shape(e)) <= rank:
            shape = (1,) * (rank - len(m.shape(e))) + tuple(m.shape(e))
            try:
                from nnvm.ops.layout import transform_shape

                transform_shape(shape, dst, src)
            except NNVMError:
                return None
            new_inputs.append(layout_transform(op("reshape", e, shape=shape), dst, src))
        else:
            return None
    inner = NodeEntry(Node(node.op, node.name, node.attrs, new_inputs), 0)
    return layout_transform(inner, src, dst)


RULES = [
    Rule("T(T(x)) -> T(x) or x", P(_T, P(_T, X("x"), name="inner")), _compose),
    Rule("T(x, A -> A) -> x", P(_T, X("x"), where=lambda a: a["src_layout"] == a["dst_layout"]),
         lambda m: m["x"]),
    Rule("f(T(x), ...) -> T(f(x, ...))", P(None), _sink),
]


@PASSES.define("CorrectLayout", provides=("layout",), invalidates=DERIVED, opt_level=0)
def correct_layout(graph: Graph) -> Graph:
    """Insert, sink and cancel ``__layout_transform__`` nodes; provide per-entry ``layout``."""
    outputs, layouts = _insert_transforms(graph)
    untouched = all(a.node is b.node and a.index == b.index
                    for a, b in zip(outputs, graph.outputs))
    if untouched and not any(n.op is not None and n.op.name == _T for n in graph.index.nodes):
        g = graph  # nothing inserted and nothing to sink or cancel: keep the graph as it is
    else:
        g = rewrite(ensure_inferred(with_outputs(graph, outputs)), RULES)
        outputs, layouts = _insert_transforms(g)
        g = with_outputs(g, outputs)
    idx = g.index
    lay = [layouts.get((id(n), k)) for n in idx.nodes for k in range(n.num_outputs)]
    return g.with_attrs(layout=lay)
