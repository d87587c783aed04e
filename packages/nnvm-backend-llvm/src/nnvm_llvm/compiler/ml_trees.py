"""``tree_ensemble`` and ``tree_ensemble_classifier`` compiled for llvm: no host tree walk.

Why: scikit-learn's trees (skl2onnx exports) ran as NumPy host steps at 7-14x onnxruntime,
which takes 6-20 us a call; NumPy's per-call overhead alone is more than that.

How: small ensembles become code (``ml_tree_walk.CodeWalk``): every interior node an ``if``
on one feature against an immediate threshold, every leaf an add into per-target
accumulators, the "if-else" compilation of tree ensembles (treelite, lleaves), where a walk
costs a compare and a branch per level with no table loads. Ensembles over ``MAX_NODES``
(LLVM's build time grows faster than that code) walk ``ml._unified``'s node table baked in
as a constant (``ml_tree_table.TableWalk``). The kernel walks every tree for every row
(rows in parallel only when the work repays a thread launch), then aggregates (SUM,
AVERAGE, MIN, MAX and the "has a score" mask), adds base values and applies the post
transform in float64, as ``nnvm.ops.ml`` does; the classifier's labels and two-class
scores follow ``_tree_cls_ref`` / ``_two_classes`` (onnxruntime 1.31, case by case).

Kept on the host (``supports`` says why, shown in ``stats()["unsupported_ops"]``):
BRANCH_MEMBER nodes, string labels, ensembles over ``MAX_TABLE_NODES`` nodes, unknown
shapes.
"""

from __future__ import annotations

import numpy as np
from tvm import tirx
from tvm.tirx.script.builder import ir as T

from nnvm.ops.ml import _labels, _prepared, _unified

from . import lowering, ml_rows
from .lowering import Lowering
from .ml_rows import F64, c64
from .ml_tree_table import TableWalk
from .ml_tree_walk import CodeWalk

#: interior nodes plus leaves one kernel holds as code (``CodeWalk``). LLVM's time grows
#: faster than the code: a 100-tree depth-6 forest (5,800 nodes) builds in ~8 s, depth 8
#: (13,000) in ~40 s on a 2-core box; larger ensembles walk a constant table (``TableWalk``)
MAX_NODES = 6_000
#: nodes plus leaves the table walk takes (a few bytes of constant data each)
MAX_TABLE_NODES = 4_000_000


def _trees_reason(attrs, shapes, n_targets) -> str | None:
    x = shapes[0] if shapes else None
    if x is None or len(x) not in (1, 2):
        return "tree ensemble with an unknown or N-d input shape (llvm compiles (N, F))"
    if 6 in attrs["nodes_modes"]:
        return "tree ensemble with BRANCH_MEMBER nodes (set membership runs on the host)"
    if any(int(m) not in range(6) for m in attrs["nodes_modes"]):
        return "tree ensemble with an unknown node mode"
    prep = _prepared(attrs, n_targets)
    if len(prep["feat"]) + prep["weight"].shape[0] > MAX_TABLE_NODES:
        return (f"tree ensemble of {len(prep['feat'])} nodes (llvm compiles up to "
                f"{MAX_TABLE_NODES} nodes and leaves)")
    if prep["feat"].size and (prep["feat"].min() < 0 or prep["feat"].max() >= (
            x[-1] if x else 1)):
        return "tree ensemble reading a feature the input does not have"
    if _cycle(prep):
        return "tree ensemble with a cycle"
    return None


def _cycle(prep) -> bool:
    """True when some walk could visit a node twice (the reference raises on it)."""
    state: dict[int, int] = {}
    children = [(int(prep["tid"][k]) if not prep["tleaf"][k] else -1,
                 int(prep["fid"][k]) if not prep["fleaf"][k] else -1)
                for k in range(len(prep["feat"]))]
    for root, leaf in zip(prep["roots"], prep["root_leaf"]):
        stack = [] if leaf else [(int(root), 0)]
        while stack:  # iterative DFS: 0 enter, 1 leave
            node, phase = stack.pop()
            if phase:
                state[node] = 2
                continue
            if state.get(node) == 1 or not 0 <= node < len(children):
                return True
            if state.get(node) == 2:
                continue
            state[node] = 1
            stack.append((node, 1))
            stack.extend((c, 0) for c in children[node] if c >= 0)
    return False


def _kernel(attrs, ins, outs, ctx, n_targets, epilogue):
    """Per row: walk every tree into ``acc``/``seen`` (float64 / int32 per target), then
    ``epilogue(walk, row, acc, seen, out_bufs)`` writes the outputs."""
    single = bool(attrs["single_precision"]) and ins[0].dtype != "float64"
    init = {"MIN": np.inf, "MAX": -np.inf}.get(attrs["aggregate_function"], 0.0)
    prep = _prepared(attrs, n_targets)
    size = len(prep["feat"]) + prep["weight"].shape[0]

    def body(in_bufs, out_bufs, row):
        walk = (CodeWalk if size <= MAX_NODES else TableWalk)(attrs, n_targets, in_bufs[0],
                                                               single)
        acc = T.alloc_buffer((n_targets,), F64, scope="local")
        seen = T.alloc_buffer((n_targets,), "int32", scope="local")
        with T.serial(0, n_targets) as t:
            T.buffer_store(acc, c64(init), [t])
            T.buffer_store(seen, tirx.const(0, "int32"), [t])
        walk.trees(row, acc, seen)
        epilogue(walk, row, acc, seen, out_bufs)
    # a row's work: one compare per level of each tree
    return ml_rows.row_kernel(ins, outs, ctx, len(prep["roots"]) * _unified(prep)["depth"],
                              body)


# -- regressor ----------------------------------------------------------------------------------

def _base_of(attrs, width: int):
    """Per-column base values as ``ml._add_base`` broadcasts them, or None if it cannot."""
    base = [float(v) for v in attrs["base_values"]]
    if not base:
        return [0.0] * width
    if len(base) >= width:
        return base[:width]
    return base * width if len(base) == 1 else None


def _regressor(attrs, ins, outs, ctx):
    n_targets = int(attrs["n_targets"])
    base = _base_of(attrs, n_targets)
    mode = attrs["post_transform"]

    def epilogue(walk, row, acc, seen, out_bufs):
        out = out_bufs[0]
        total = T.alloc_buffer((n_targets,), F64, scope="local")
        for t in range(n_targets):  # targets are few; base values are immediates
            T.buffer_store(total, walk.final(acc, seen, t) + c64(base[t]), [t])
        ml_rows.store_row(mode, n_targets, lambda c: total[c], lambda c, v: T.buffer_store(
            out, v.astype(out.dtype), ml_rows.at(out, row, c)))
    return _kernel(attrs, ins, outs, ctx, n_targets, epilogue)


def _regressor_supports(attrs, shapes):
    if _base_of(attrs, int(attrs["n_targets"])) is None:
        return "tree ensemble whose base_values do not match n_targets"
    return _trees_reason(attrs, shapes, int(attrs["n_targets"]))


# -- classifier ---------------------------------------------------------------------------------

def _multi_class(attrs, labels, walk, row, acc, seen, out_bufs):
    """Three or more classes: base values added (a class with one counts as scored), the
    label is the best scored class on the raw sums, then the post transform."""
    label, scores = out_bufs
    n_cls = len(labels)
    base = [float(v) for v in attrs["base_values"]]
    s = T.alloc_buffer((n_cls,), F64, scope="local")
    added = _base_of(attrs, n_cls)
    for c in range(n_cls):
        T.buffer_store(s, walk.final(acc, seen, c) + c64(added[c]), [c])
    pick = T.alloc_buffer((1,), "int32", scope="local")
    ml_rows.argmax_into(pick, lambda c: s[c], n_cls, lambda c: tirx.const(True, "bool")
                        if c < len(base) else walk.scored(seen, c))
    T.buffer_store(label, ml_rows.label_expr(labels, pick[0]), [row])
    ml_rows.store_row(attrs["post_transform"], n_cls, lambda c: s[c],
                      lambda c, v: T.buffer_store(scores, v.astype("float32"), [row, c]))


def _two_class(attrs, labels, walk, row, acc, seen, out_bufs):
    """``ml._two_classes`` for one row: which base values exist and whether class 1 got a
    weight choose between a (class 0, class 1) pair through the post transform and a single
    score expanded as ``ml.write_scores`` does."""
    label, scores = out_bufs
    mode = attrs["post_transform"]
    base = [float(v) for v in attrs["base_values"]]
    binary = len(set(attrs["leaf_targetids"])) == 1
    positive = min(attrs["leaf_weights"], default=0.0) >= 0
    h0, h1 = walk.scored(seen, 0), walk.scored(seen, 1)
    raw0, raw1 = walk.final(acc, seen, 0), walk.final(acc, seen, 1)
    pair = T.alloc_buffer((2,), F64, scope="local")  # (s0, s1) after the base values
    never = tirx.const(False, "bool")
    if len(base) == 2:
        moved = c64(base[1]) + raw0
        T.buffer_store(pair, tirx.Select(h1, -moved, raw0 + c64(base[0])), [0])
        T.buffer_store(pair, tirx.Select(h1, moved, raw1 + c64(base[1])), [1])
        single = never
    else:  # one base value is added to class 0; none, or more than two, add nothing
        T.buffer_store(pair, raw0 + c64(base[0] if len(base) == 1 else 0.0), [0])
        T.buffer_store(pair, raw1, [1])
        single = tirx.Not(h1)
    s0, s1 = pair[0], pair[1]
    pos = tirx.Select(tirx.And(tirx.Not(single), h1), s1, tirx.Select(h0, s0, c64(0)))
    win = pos > c64(0.5 if binary and positive else 0.0)
    if not binary and _labels(attrs)[1] == "int64":
        labels = [0, 1]  # onnxruntime returns 1 / 0 here, not the labels
    T.buffer_store(label, ml_rows.label_expr(labels, tirx.Select(win, 1, 0)), [row])
    # the class-0 score is 0 where no leaf scored it; class 1 likewise
    T.buffer_store(pair, tirx.Select(h0, s0, c64(0)), [0])
    T.buffer_store(pair, tirx.Select(h1, pair[1], c64(0)), [1])
    z = T.alloc_buffer((2,), F64, scope="local")
    ml_rows.store_row(mode, 2, lambda c: pair[c], lambda c, v: T.buffer_store(z, v, [c]))
    one = _single_column(mode, pair[0], binary and positive, len(base) == 1 and not binary)
    for c in range(2):
        T.buffer_store(scores, tirx.Select(single, one[c], z[c]).astype("float32"), [row, c])


def _single_column(mode: str, s, positive_binary: bool, as_is: bool):
    """``ml.write_scores`` of one score column: PROBIT keeps one column; a positive binary
    ensemble (add 0/1) gives (1 - t, t); a mixed one or no base values (add 2/3) gives
    (-s, s); one base value on a non-binary ensemble (add -1) keeps s."""
    zero = c64(0)
    if mode == "PROBIT":
        return ml_rows.probit(s), zero
    if as_is:
        return s, zero
    if positive_binary:
        t = ml_rows.sigmoid(s) if mode == "LOGISTIC" else s
        return c64(1) - t, t
    if mode == "LOGISTIC":
        return ml_rows.sigmoid(-s), ml_rows.sigmoid(s)
    return -s, s


def _classifier(attrs, ins, outs, ctx):
    labels, _ = _labels(attrs)
    step = _two_class if len(labels) == 2 else _multi_class

    def epilogue(walk, row, acc, seen, out_bufs):
        step(attrs, labels, walk, row, acc, seen, out_bufs)
    return _kernel(attrs, ins, outs, ctx, len(labels), epilogue)


def _classifier_supports(attrs, shapes):
    labels, kind = _labels(attrs)
    if kind != "int64":
        return "tree ensemble classifier with string labels (llvm kernels return numbers)"
    if len(labels) < 2:
        return "tree ensemble classifier with fewer than two classes"
    if len(labels) > 2 and _base_of(attrs, len(labels)) is None:
        return "tree ensemble classifier whose base_values do not match the classes"
    return _trees_reason(attrs, shapes, len(labels))


def install() -> None:
    """Add the rules unless the table already lowers the ops (its own rule wins)."""
    for name, rule, supports in (("tree_ensemble", _regressor, _regressor_supports),
                                 ("tree_ensemble_classifier", _classifier,
                                  _classifier_supports)):
        if name not in lowering.LOWERINGS:
            lowering.LOWERINGS[name] = Lowering(rule, "extern", None, supports)
