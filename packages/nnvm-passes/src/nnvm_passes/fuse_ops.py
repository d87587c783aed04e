"""FuseOps: partition the graph into fused groups, one kernel each (NNVM's
GraphFindFusibleGroups, with the diamond rule of TVM's NNVM).

Output contract (what a backend consumes; nodes are numbered by ``graph.index``):

* ``group_root``: list, one int per node. For an op node, the id of the root of its group:
  the node whose outputs the group's kernel produces. Variables get -1 (no kernel).
* ``group_master``: list, one int per node. For an op node, the id of the node whose
  schedule the group uses (its conv2d/dense/reduction if it has one, otherwise the root);
  -1 for variables.
* ``num_groups``: int, the number of groups, i.e. of kernels.
* ``pattern``: list, one int per node: the group-level ``OpPattern`` after fusion.

Invariants a backend may rely on: a group is the set of op nodes sharing a ``group_root``;
the root has the largest id in its group; every output of a non-root member is read only by
members of the same group (never by another group, never a graph output), so "one kernel per
group" needs to materialise only the root's outputs; a group's inputs are the entries its
members read from outside it (variables or other groups' roots), and groups in order of their
root id are a valid execution order. Without these attributes (FuseOps disabled, opt_level
0) every op node is its own group.

Rules, by the ``TOpPattern`` of each op (``nnvm.op.OpPattern``):

* ELEMWISE / BROADCAST absorb ELEMWISE, BROADCAST and INJECTIVE parents and at most one
  OUT_ELEMWISE_FUSABLE parent (conv2d, dense, matmul) of the same output shape, which then
  becomes the group's master: conv2d + bias + scale + relu + residual add is one kernel.
* INJECTIVE and COMM_REDUCE absorb INJECTIVE-or-lighter parents; COMM_REDUCE is the master.
* OUT_ELEMWISE_FUSABLE and OPAQUE take no parents.
* A node read by more than one consumer, or a graph output, is realised (ends its group) --
  except by the diamond rule: a non-opaque node whose consumers all ended in one ELEMWISE /
  BROADCAST group joins that group (conv2d -> {three elementwise branches} -> add).
* When opt_level < 1 (graph attribute ``opt_level``), every op is its own group.
"""

from __future__ import annotations

from nnvm.ir import Graph
from nnvm.op import OpPattern
from nnvm.pass_manager import PassSet

PASSES = PassSet()

EW, BC, INJ, RED, OUT_EW, OPQ = (OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE,
                                 OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE,
                                 OpPattern.OPAQUE)
UNKNOWN, FUSE, REALIZE = 0, 1, 2


def op_pattern(node) -> OpPattern:
    """The node's TOpPattern; OPAQUE for ops without one (never fused by accident)."""
    return OpPattern(node.op.get_attr("TOpPattern", OPQ)) if node.op is not None else OPQ


def _ref_counts(idx) -> list[int]:
    refs = [0] * idx.num_nodes
    for ins in idx.inputs:
        for i, _, _ in ins:
            refs[i] += 1
    for i, _, _ in idx.outputs:
        refs[i] += 1
    return refs


def _find_groups(graph: Graph, opt_level: int):
    """NNVM's forward sweep (who may fuse into its consumer) then backward group labelling."""
    idx = graph.index
    shapes = graph.attrs.get("shape") or [None] * idx.num_node_entries
    refs = _ref_counts(idx)
    n = idx.num_nodes
    pattern, fuse, master = [OPQ] * n, [UNKNOWN] * n, [-1] * n
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            fuse[nid] = REALIZE
            continue
        pt = op_pattern(node)
        out_shape = shapes[idx.entry_id(nid, 0)]
        parents = [i for i, _, _ in idx.inputs[nid] if fuse[i] == UNKNOWN]
        if pt <= BC:
            chosen = -1
            ewise = node.num_outputs == 1
            for i, k, _ in idx.inputs[nid]:
                if fuse[i] == UNKNOWN:
                    ipt = pattern[i]
                    ewise &= ipt == EW
                    if ipt <= INJ:
                        fuse[i] = FUSE
                    elif ipt == OUT_EW and chosen == -1 and out_shape is not None and \
                            shapes[idx.entry_id(i, k)] == out_shape:
                        chosen, fuse[i] = master[i], FUSE
                    else:
                        fuse[i] = REALIZE
                ewise &= shapes[idx.entry_id(i, k)] == out_shape
            master[nid] = chosen
            pt = OUT_EW if chosen != -1 else (EW if ewise else BC)
        elif pt in (INJ, RED):
            for i in parents:
                fuse[i] = FUSE if pattern[i] <= INJ else REALIZE
            if pt == RED:
                master[nid] = nid
        else:
            master[nid] = nid
            for i in parents:
                fuse[i] = REALIZE
                if master[i] == -1:
                    master[i] = i
        pattern[nid] = pt
        if refs[nid] > 1 or opt_level < 1:
            fuse[nid] = REALIZE
        if master[nid] == -1 and fuse[nid] == REALIZE:
            master[nid] = nid
    group = [-1] * n
    members: dict[int, list[int]] = {}
    for nid in reversed(range(n)):
        if idx.nodes[nid].op is None:
            continue
        if group[nid] == -1:
            group[nid] = nid
            members[nid] = [nid]
        fused = [i for i, _, _ in idx.inputs[nid] if fuse[i] == FUSE]
        if any(pattern[i] == OUT_EW for i in fused) and any(pattern[i] == INJ for i in fused):
            for j in members[group[nid]]:  # injective + conv in one group: schedule as ewise
                master[j] = nid
            master[nid] = nid
        for i in fused:
            if group[i] == -1:
                group[i] = group[nid]
                members[group[nid]].append(i)
    for root, ms in members.items():  # one master per group: its heavy op, else the root
        m = master[root] if master[root] in ms else root
        for j in ms:
            master[j] = m
    if opt_level >= 1:
        _fuse_diamonds(idx, shapes, refs, pattern, group, master, members)
    return group, master, pattern, members


def _fuse_diamonds(idx, shapes, refs, pattern, group, master, members) -> None:
    """A realised, non-opaque node whose consumers all ended in one elementwise/broadcast
    group joins it (with its own group), if it is not a graph output.

    Per-group summaries (heaviest pattern, output shapes, master) are kept up to date on each
    merge, so a long chain of diamonds costs linear, not quadratic, time.
    """
    consumers: list[list[int]] = [[] for _ in range(idx.num_nodes)]
    for nid, ins in enumerate(idx.inputs):
        for i, _, _ in ins:
            consumers[i].append(nid)
    outputs = {i for i, _, _ in idx.outputs}
    heaviest = {g: max(op_pattern(idx.nodes[j]) for j in ms) for g, ms in members.items()}
    out_shapes = {g: {shapes[idx.entry_id(j, 0)] for j in ms} for g, ms in members.items()}
    gmaster = {g: master[g] for g in members}
    out_ew = set()
    for nid in reversed(range(idx.num_nodes)):
        node = idx.nodes[nid]
        if node.op is None or refs[nid] < 2 or nid in outputs or group[nid] != nid:
            continue
        targets = {group[c] for c in consumers[nid]}
        if op_pattern(node) == OPQ or node.num_outputs != 1 or len(targets) != 1:
            continue
        target = targets.pop()
        if heaviest[target] > BC:
            continue
        heavy = op_pattern(idx.nodes[gmaster[nid]])
        if heavy == RED:
            continue
        own_shape = shapes[idx.entry_id(nid, 0)]
        if heavy == OUT_EW and out_shapes[target] != {own_shape}:
            continue
        own = members.pop(nid)
        for j in own:
            group[j] = target
        members[target].extend(own)
        heaviest[target] = max(heaviest[target], heaviest.pop(nid))
        small, big = sorted((out_shapes.pop(nid), out_shapes[target]), key=len)
        big |= small
        out_shapes[target] = big
        gmaster[target] = gmaster.pop(nid) if heavy == OUT_EW else target
        if heavy == OUT_EW:
            out_ew.add(target)
        out_ew.discard(nid)
    for g, ms in members.items():
        for j in ms:
            master[j] = gmaster[g]
            if g in out_ew:
                pattern[j] = OUT_EW


@PASSES.define("FuseOps", requires=("shape",), provides=("group_root", "group_master",
                                                          "num_groups", "pattern"), opt_level=1)
def fuse_ops(graph: Graph) -> Graph:
    """Partition op nodes into fused groups (one kernel each); see the module docstring for
    the ``group_root`` / ``group_master`` / ``num_groups`` contract. Reads ``opt_level``
    (default 2): below 1, one group per op."""
    opt_level = int(graph.attrs.get("opt_level", 2))
    group, master, pattern, members = _find_groups(graph, opt_level)
    return graph.with_attrs(group_root=group, group_master=master, num_groups=len(members),
                            pattern=[int(p) for p in pattern])
