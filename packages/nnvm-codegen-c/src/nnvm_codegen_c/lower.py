"""Lower a fused, shape-inferred graph to kernels: one kernel per fused group (per output).

Reads the FuseOps contract (``group_root``, ``group_master``; see nnvm_passes.fuse_ops) when
present, and otherwise treats every op node as its own group. A group some member of which
has no rule for this renderer, or whose composition a template cannot express, is split into
single-node groups; a node that still cannot be lowered becomes a *host step*, run on the host
with its NumPy reference kernel (the backend counts these as fallback ops).
"""

from __future__ import annotations

import dataclasses
import re

from nnvm.errors import UnsupportedOpError

from .arena import host_only
from .builder import GraphInfo, KernelBuilder
from .renderer import CLikeRenderer, Kernel
from .rules import FLOAT_ONLY, VALUE_RULES
from .templates import TEMPLATES, elementwise


@dataclasses.dataclass
class Step:
    """One unit of execution, in order.

    Attributes:
        kind: ``"kernel"`` (device kernels) or ``"host"`` (the node's reference kernel).
        root: the group's root node id (for a host step, the node itself).
        members: the group's node ids.
        kernels: the kernels to launch (kernel steps).
        outputs: entry ids the step materialises.
        inputs: entry ids it reads that come from outside the group.
        reason: why a host step could not be lowered.
    """

    kind: str
    root: int
    members: list[int]
    kernels: list[Kernel]
    outputs: list[int]
    inputs: list[int]
    reason: str = ""


def lowerable(renderer: CLikeRenderer, info: GraphInfo, nid: int) -> str | None:
    """None when node ``nid`` has a rule for this renderer, else the reason it has none."""
    node = info.idx.nodes[nid]
    name = node.op.name
    if name not in VALUE_RULES and name not in TEMPLATES:
        return f"no {renderer.dialect} lowering rule for op {name}"
    entries = info.inputs(nid) + [info.entry(nid, k) for k in range(info.num_outputs(nid))]
    for e in entries:
        dt = info.dtypes[e]
        if host_only(dt):
            return f"dtype {dt} tensors live on the host only (no device layout)"
        if dt not in renderer.type_map or dt in ("float16", "bfloat16"):
            return f"dtype {dt} is not supported by the {renderer.dialect} renderer"
        if info.shapes[e] is None:
            return "unknown shape"
    if name in FLOAT_ONLY and not all(info.dtypes[e].startswith("float") for e in entries
                                      if info.dtypes[e] != "bool"):
        return f"op {name} is lowered for floating-point dtypes only"
    return None


def _groups(graph, info: GraphInfo) -> list[tuple[int, int, list[int]]]:
    idx = info.idx
    roots = graph.attrs.get("group_root")
    masters = graph.attrs.get("group_master")
    ok = isinstance(roots, list) and isinstance(masters, list) and \
        len(roots) == len(masters) == idx.num_nodes
    members: dict[int, list[int]] = {}
    master_of: dict[int, int] = {}
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            continue
        root = roots[nid] if ok and roots[nid] >= 0 else nid
        members.setdefault(root, []).append(nid)
        master_of[root] = masters[nid] if ok and masters[nid] >= 0 else root
    return [(root, master_of[root], sorted(ms)) for root, ms in sorted(members.items())]


def _kernel_name(info: GraphInfo, root: int, k: int | None) -> str:
    base = re.sub(r"[^0-9a-zA-Z_]", "_", info.idx.nodes[root].name or "node")[:40]
    return f"k{root}_{base}" + (f"_o{k}" if k is not None else "")


def lower_group(renderer: CLikeRenderer, info: GraphInfo, root: int, master: int,
                members: list[int], limits: dict | None = None) -> list[Kernel]:
    """The kernels of one fused group.

    Raises:
        UnsupportedOpError: a member has no rule or the composition is not expressible.
    """
    mset = set(members)
    if master not in mset:
        master = root
    mop = info.idx.nodes[master].op.name
    use_template = mop in TEMPLATES
    for nid in members:
        name = info.idx.nodes[nid].op.name
        if nid != master and name not in VALUE_RULES:
            raise UnsupportedOpError(f"group {root}: member {name} needs its own kernel")
    if use_template and master != root:
        me, re_ = info.entry(master, 0), info.entry(root, 0)
        if info.num_outputs(master) != 1 or info.num_outputs(root) != 1 or \
                info.shapes[me] != info.shapes[re_]:
            raise UnsupportedOpError(f"group {root}: epilogue shape differs from its master")
    if not use_template and mop not in VALUE_RULES:
        raise UnsupportedOpError(f"group {root}: op {mop} has no rule")
    kernels = []
    nout = info.num_outputs(root)
    for k in range(nout if not use_template else 1):
        def builder():
            return KernelBuilder(renderer, info, mset, root, master if use_template else root,
                                 _kernel_name(info, root, k if nout > 1 else None), limits)
        b = builder()
        variant = renderer.template_variant(mop, b.limits) if use_template else None
        if variant is not None:
            if not variant(b, master):  # declined: the portable template runs
                b = builder()
                TEMPLATES[mop](b, master)
        elif use_template:
            TEMPLATES[mop](b, master)
        else:
            elementwise(b, root, k)
        kernels.append(b.finish())
    return kernels


def _step_io(info: GraphInfo, root: int, members: list[int]) -> tuple[list[int], list[int]]:
    mset = set(members)
    ins: list[int] = []
    for nid in members:
        for i, k, _ in info.idx.inputs[nid]:
            e = info.entry(i, k)
            if i not in mset and e not in ins:
                ins.append(e)
    outs = [info.entry(root, k) for k in range(info.num_outputs(root))]
    return ins, outs


def lower_graph(graph, renderer: CLikeRenderer, limits: dict | None = None,
                unsupported: set[str] = frozenset()) -> list[Step]:
    """All steps of a graph in execution order (kernel steps and host fallback steps).

    Args:
        graph: a graph with ``shape`` and ``dtype`` (and optionally FuseOps') attributes.
        renderer: the dialect.
        limits: device limits for the templates' work-group choices.
        unsupported: op names the backend wants on the host regardless of rules.
    """
    info = GraphInfo(graph)
    steps: list[Step] = []
    for root, master, members in _groups(graph, info):
        reasons = {n: ("excluded by the backend" if info.idx.nodes[n].op.name in unsupported
                       else lowerable(renderer, info, n)) for n in members}
        parts = [(root, master, members)]
        if len(members) > 1 and any(reasons.values()):
            parts = [(n, n, [n]) for n in members]
        for proot, pmaster, pmembers in parts:
            if len(pmembers) == 1 and reasons[proot]:
                steps.append(_host(info, proot, reasons[proot]))
                continue
            try:
                kernels = lower_group(renderer, info, proot, pmaster, pmembers, limits)
            except UnsupportedOpError as exc:
                if len(pmembers) == 1:
                    steps.append(_host(info, proot, str(exc)))
                    continue
                for n in pmembers:  # split and retry one node at a time
                    try:
                        ks = lower_group(renderer, info, n, n, [n], limits)
                        ins, outs = _step_io(info, n, [n])
                        steps.append(Step("kernel", n, [n], ks, outs, ins))
                    except UnsupportedOpError as exc2:
                        steps.append(_host(info, n, str(exc2)))
                continue
            ins, outs = _step_io(info, proot, pmembers)
            steps.append(Step("kernel", proot, pmembers, kernels, outs, ins))
    steps.sort(key=lambda s: s.root)
    return steps


def step_stats(info: GraphInfo, steps: list[Step], act_bytes: int, arena_bytes: int) -> dict:
    """The ``stats()`` entries every arena backend reports: planned bytes, groups, and the
    ops that ran as host (reference-kernel) steps, with the reason each had no kernel."""
    host = [s for s in steps if s.kind == "host"]
    nodes = info.idx.nodes
    return {
        "activation_bytes": act_bytes,
        "memory_planned": True,
        "arena_bytes": arena_bytes,
        "num_groups": sum(1 for s in steps if s.kind == "kernel"),
        "num_fallback_ops": len(host),
        "fallback_ops": {nodes[s.root].name: f"{nodes[s.root].op.name}: {s.reason}"
                         for s in host},
    }


def _host(info: GraphInfo, nid: int, reason: str) -> Step:
    ins, outs = _step_io(info, nid, [nid])
    return Step("host", nid, [nid], [], outs, ins, reason)

