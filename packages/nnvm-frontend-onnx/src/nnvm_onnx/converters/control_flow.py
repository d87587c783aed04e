"""If, Loop and Scan: subgraphs become NNVM Graphs held in ``Node.subgraphs``.

An If whose condition folds to a constant is replaced by its branch, converted inline in the
enclosing graph (no control flow survives). Otherwise the node becomes NNVM's ``if_else``,
``loop`` or ``scan`` op (``nnvm/ops/control_flow.py``), whose subgraphs read enclosing values
through extra *captured* inputs; the reference interpreter executes them with
``FReferenceNode``.
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import ShapeError, TypeInferenceError

from ..errors import NeedsConstantError, OnnxImportError, OnnxUnsupportedError, format_error
from ..importer import STRUCTURED, Scope
from ..registry import converter


def inline_graph(ctx, graph_proto, inputs=(), prefix: str | None = None):
    """Convert a subgraph's nodes into the enclosing graph, its formal inputs bound to
    ``inputs`` (Values, SeqValues...); returns its output values. Used for If branches with a
    constant condition, unrolled Loops and SequenceMap."""
    import onnx

    from ..importer import Value
    from ..tensors import tensor_to_array

    scope = Scope(ctx.scope)
    for formal, v in zip(graph_proto.input, inputs):
        scope.values[formal.name] = v
    for t in graph_proto.initializer:
        scope.values[t.name] = Value(t.name, const=tensor_to_array(t, ctx.where))
    prefix = prefix or (ctx.node.name or ctx.node.output[0]) + "/"
    nodes = []
    for n in graph_proto.node:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.name = prefix + (n.name or n.op_type)
        nodes.append(m)
    ctx.importer.convert_nodes(ctx.builder, scope, nodes)
    outs = []
    for o in graph_proto.output:
        v = scope.lookup(o.name)
        if v is None:
            raise OnnxImportError(format_error(ctx.where, f"subgraph output '{o.name}' is "
                                               "produced by no node"))
        outs.append(v)
    return outs


def _inline_branch(ctx, graph_proto):
    return inline_graph(ctx, graph_proto)


def _returns_structured(graph_proto) -> bool:
    return any(o.type.WhichOneof("value") in ("sequence_type", "optional_type")
               for o in graph_proto.output)


def _capture_inputs(captured):
    return [v for _, v in captured]


@converter("If", requires=("if_else",))
def _if(ctx, node):
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    cond = ctx.input(0)
    if cond.const is not None:
        take = bool(np.asarray(cond.const).reshape(-1)[0])
        return _inline_branch(ctx, then_g if take else else_g)
    if _returns_structured(then_g) or _returns_structured(else_g):
        raise ctx.importer.needs_constant(ctx, cond, "the condition (a branch returns a "
                                          "sequence or optional, resolved at import time)")
    then_b, then_why = _branch(ctx, then_g)
    else_b, else_why = _branch(ctx, else_g)
    if then_b is None and else_b is None:
        raise then_why
    if then_b is None or else_b is None:
        # one branch cannot take these input shapes (e.g. a model that switches on its
        # sample rate, imported for one of them): onnxruntime only runs the taken branch, so
        # the import goes on; selecting the pruned branch at run time is a clear error
        good = then_b or else_b
        then_b = then_b or (good[0], good[1], good[2], [], good[4])
        else_b = else_b or (good[0], good[1], good[2], [], good[4])
    unrunnable = tuple(_brief(w) for w in (then_why, else_why))
    t_graph, t_params, _, t_cap, t_outs = then_b
    e_graph, e_params, _, e_cap, e_outs = else_b
    t_graph = t_graph.with_attrs(params=t_params)
    e_graph = e_graph.with_attrs(params=e_params)
    out_shapes = []
    for a, b in zip(t_outs, e_outs):
        out_shapes.append(a.shape if a.shape == b.shape else None)
    out_dtypes = [a.dtype or b.dtype for a, b in zip(t_outs, e_outs)]
    if ctx.importer.static_shapes and any(s is None for s in out_shapes):
        raise ctx.importer.needs_constant(
            ctx, cond, "the condition (the branches' output shapes differ)")
    ins = [cond] + _capture_inputs(t_cap) + _capture_inputs(e_cap)
    return ctx.op_multi("if_else", *ins, num_outputs=len(t_outs),
                        num_then_captured=len(t_cap),
                        then_inputs=tuple(n for n, _ in t_cap),
                        else_inputs=tuple(n for n, _ in e_cap),
                        output_shapes=tuple(out_shapes), output_dtypes=tuple(out_dtypes),
                        **({"unrunnable": unrunnable} if any(unrunnable) else {}),
                        subgraphs=[t_graph, e_graph])


def _branch(ctx, graph_proto):
    """``(ctx.subgraph(...) result, None)``, or ``(None, error)`` when the branch cannot be
    imported with the enclosing graph's shapes (shape, type or static-value errors)."""
    try:
        return ctx.subgraph(graph_proto), None
    except (OnnxImportError, ShapeError, TypeInferenceError) as exc:
        return None, exc


def _brief(exc) -> str:
    return "" if exc is None else " ".join(str(exc).split())[:400]


@converter("Loop", requires=("loop",))
def _loop(ctx, node):
    body = ctx.attr("body")
    trip = ctx.input(0) if ctx.has_input(0) else ctx.constant(
        np.array(np.iinfo(np.int64).max, dtype=np.int64))
    cond = ctx.input(1) if ctx.has_input(1) else ctx.constant(np.array(True))
    carried = [ctx.input(i) for i in range(2, ctx.num_inputs)]
    nc = len(carried)
    if any(isinstance(v, STRUCTURED) for v in carried) or _returns_structured(body):
        return _unroll_loop(ctx, body, trip, cond, carried)
    specs = [((), "int64"), ((), "bool")] + [(v.shape, v.dtype) for v in carried]
    try:
        g, params, formal, captured, outs = ctx.subgraph(body, input_specs=specs)
    except NeedsConstantError as exc:
        # The body needs a per-iteration constant (a Slice bound computed from the
        # iteration number...): unroll when the trip count is known and small.
        if exc.inputs:  # it needs a value of the enclosing graph: not an unrolling matter
            raise
        if trip.const is None:
            raise ctx.importer.needs_constant(ctx, trip, "the trip count (the body needs "
                                              "per-iteration constants, so the loop is "
                                              "unrolled)") from None
        if int(trip.const.reshape(-1)[0]) > _MAX_UNROLL:
            raise
        return _unroll_loop(ctx, body, trip, cond, carried)
    ns = len(outs) - 1 - nc
    if ns < 0:
        raise OnnxImportError(format_error(ctx.where, "body has fewer outputs than carried "
                                           "values", 1 + nc, len(outs)))
    # The iteration count is static when the trip count is a constant and the body's
    # condition output is its condition input or a constant true.
    body_cond = outs[0]
    static_trip = None
    if trip.const is not None and (cond.const is None or bool(cond.const.reshape(-1)[0])):
        passthrough = body_cond.entry is not None and body_cond.entry.node.op is None and \
            body_cond.entry.node.name == formal[1]
        if (body_cond.const is not None and bool(body_cond.const.reshape(-1)[0])) or \
                (passthrough and cond.const is not None):
            static_trip = int(trip.const.reshape(-1)[0])
    shapes, dtypes, elem = [], [], []
    for k, v in enumerate(outs[1:]):
        dtypes.append(v.dtype)
        if k < nc:
            shapes.append(v.shape if v.shape == carried[k].shape else None)
        else:
            elem.append(v.shape)
            shapes.append(None if static_trip is None or v.shape is None
                          else (static_trip, *v.shape))
    return ctx.op_multi("loop", trip, cond, *carried, *[v for _, v in captured],
                        num_outputs=nc + ns, num_carried=nc, num_scan_outputs=ns,
                        body_inputs=tuple(formal + [n for n, _ in captured]),
                        scan_elem_shapes=tuple(elem), output_shapes=tuple(shapes),
                        output_dtypes=tuple(dtypes), subgraphs=[g.with_attrs(params=params)])


#: Most iterations a Loop is unrolled into at import time.
_MAX_UNROLL = 4096


def _unroll_loop(ctx, body, trip, cond, carried):
    """Unroll a Loop at import time: needed when it carries sequences or optionals (their
    structure changes per iteration) or when its body needs per-iteration constants. The
    trip count and every condition must be known at import time."""
    from ..importer import Value

    if cond.const is None:
        raise ctx.importer.needs_constant(ctx, cond, "the loop condition (the loop is "
                                          "unrolled at import time)")
    if trip.const is None:
        raise ctx.importer.needs_constant(ctx, trip, "the trip count (the loop is unrolled "
                                          "at import time)")
    limit = int(trip.const.reshape(-1)[0])
    go = bool(cond.const.reshape(-1)[0])
    nc = len(carried)
    scans: list[list] = []
    base = ctx.node.name or ctx.node.output[0]
    i = 0
    while go and i < limit:
        if i >= _MAX_UNROLL:
            raise OnnxUnsupportedError(format_error(
                ctx.where, f"the loop runs more than {_MAX_UNROLL} iterations, too many to "
                "unroll", fix="Carry tensors instead of sequences, or bound the trip count"))
        it = Value(f"{base}_iter{i}", const=np.array(i, dtype=np.int64))
        c = Value(f"{base}_cond{i}", const=np.array(go))
        outs = inline_graph(ctx, body, [it, c, *carried], prefix=f"{base}/iter{i}/")
        if len(outs) < 1 + nc:
            raise OnnxImportError(format_error(ctx.where, "body has fewer outputs than "
                                               "carried values", 1 + nc, len(outs)))
        if outs[0].const is None:
            raise ctx.importer.needs_constant(ctx, outs[0], "the body's condition output "
                                              "(the loop is unrolled at import time)")
        go = bool(np.asarray(outs[0].const).reshape(-1)[0])
        carried = list(outs[1:1 + nc])
        if not scans:
            scans = [[] for _ in outs[1 + nc:]]
        for acc, v in zip(scans, outs[1 + nc:]):
            acc.append(v)
        i += 1
    if i == 0 and len(body.output) > 1 + nc:
        raise OnnxUnsupportedError(format_error(ctx.where, "a loop that runs zero times has "
                                                "scan outputs of unknown element shape"))
    stacked = []
    for acc in scans:
        parts = [ctx.op("expand_dims", v, axis=0) for v in acc]
        stacked.append(parts[0] if len(parts) == 1 else
                       ctx.op("concatenate", *parts, axis=0))
    return carried + stacked


@converter("Scan", since=9, requires=("scan",))
def _scan(ctx, node):
    nx = ctx.attr("num_scan_inputs")
    ins = [ctx.input(i) for i in range(ctx.num_inputs)]
    ns = len(ins) - nx
    return _scan_core(ctx, ins[:ns], ins[ns:], ctx.attr("scan_input_axes", [0] * nx),
                      list(ctx.attr("scan_input_directions", [0] * nx)))


@converter("Scan", since=8, requires=("scan",))
def _scan_v8(ctx, node):
    """Scan-8 has a leading batch axis on every state and scan input (and optional
    per-batch sequence lengths): one opset-9 scan per batch element, results stacked."""
    nx = ctx.attr("num_scan_inputs")
    ins = [ctx.input(i) if ctx.has_input(i) else None for i in range(ctx.num_inputs)]
    lens, ins = ins[0], ins[1:]
    ns = len(ins) - nx
    states, xs = ins[:ns], ins[ns:]
    batch = ctx.shape(states[0] if states else xs[0])[0]
    if lens is not None:
        steps = ctx.shape(xs[0])[1] if xs else 0
        if any(int(n) != steps for n in np.asarray(ctx.const(0)).reshape(-1)):
            raise OnnxUnsupportedError(format_error(
                ctx.where, "Scan-8 with sequence lengths shorter than the scan axis",
                fix="Pad to full length or use opset >= 9 Scan"))
    from .tensor import reshape_to, slice_axis

    def row(v, b):
        return reshape_to(ctx, slice_axis(ctx, v, 0, b, b + 1), ctx.shape(v)[1:])

    per_batch = []
    for b in range(batch):
        per_batch.append(_scan_core(ctx, [row(v, b) for v in states], [row(v, b) for v in xs],
                                    [0] * nx, list(ctx.attr("directions", [0] * nx))))
    outs = []
    for k in range(len(per_batch[0]) if per_batch else 0):
        parts = [ctx.op("expand_dims", res[k], axis=0) for res in per_batch]
        outs.append(parts[0] if len(parts) == 1 else ctx.op("concatenate", *parts, axis=0))
    return outs


def _scan_core(ctx, states, xs, in_axes, in_dirs):
    body = ctx.attr("body")
    nx, ns = len(xs), len(states)
    in_axes = [a % max(ctx.rank(x), 1) for a, x in zip(in_axes, xs)]
    specs = [(v.shape, v.dtype) for v in states]
    for x, ax in zip(xs, in_axes):
        shp = ctx.shape(x)
        specs.append((shp[:ax] + shp[ax + 1:], x.dtype))
    g, params, formal, captured, outs = ctx.subgraph(body, input_specs=specs)
    n_out = len(outs) - ns
    steps = ctx.shape(xs[0])[in_axes[0]] if xs else 0
    out_axes = list(ctx.attr("scan_output_axes", [0] * n_out))
    out_dirs = list(ctx.attr("scan_output_directions", [0] * n_out))
    shapes, dtypes = [], []
    for k, v in enumerate(outs):
        dtypes.append(v.dtype)
        if k < ns:
            shapes.append(v.shape)
            continue
        if v.shape is None:
            shapes.append(None)
            continue
        full = [steps, *v.shape]
        ax = out_axes[k - ns] % len(full)
        shapes.append(tuple(full[1:ax + 1] + [steps] + full[ax + 1:]))
    out_axes = [a % (len(v.shape) + 1) if v.shape is not None else a
                for a, v in zip(out_axes, outs[ns:])]
    return ctx.op_multi("scan", *states, *xs, *[v for _, v in captured],
                        num_outputs=len(outs), num_states=ns, num_scan_inputs=nx,
                        scan_input_axes=tuple(in_axes), scan_input_directions=tuple(in_dirs),
                        scan_output_axes=tuple(out_axes),
                        scan_output_directions=tuple(out_dirs),
                        body_inputs=tuple(formal + [n for n, _ in captured]),
                        output_shapes=tuple(shapes), output_dtypes=tuple(dtypes),
                        subgraphs=[g.with_attrs(params=params)])
