"""Control flow with subgraphs: ``if_else``, ``loop`` and ``scan`` (ONNX If / Loop / Scan).

The bodies are NNVM Graphs held in ``Node.subgraphs``; their constants live in the subgraph's
``params`` graph attribute and every value they read from the enclosing graph arrives as an
extra (*captured*) input of the node, so a subgraph is a closed function of its variables.
Kernels need the node (to reach the subgraphs), hence ``FReferenceNode`` rather than
``FReference``. Output shapes and dtypes are computed by the frontend when it converts the
bodies and recorded as attributes; ``None`` marks a shape that depends on the data (a Loop
that stops early), which the op flags with ``TDynamicShape``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ExecutionError, format_error, node_where
from ..op import OpPattern, OpSet
from ..params import Param

defs = OpSet("control_flow")

_MAX_ITERATIONS = 1 << 31


def _hint_shape(attrs, ins, outs):
    hints = list(attrs.get("output_shapes") or ())
    return ins, [None if k >= len(hints) or hints[k] is None else tuple(hints[k])
                 for k in range(len(outs))]


def _hint_dtype(attrs, ins, outs):
    hints = list(attrs.get("output_dtypes") or ())
    return ins, [None if k >= len(hints) else hints[k] for k in range(len(outs))]


def _run(node, graph, feed: dict) -> list[np.ndarray]:
    """Execute one subgraph with its params and ``feed``: through the runner a compiled
    backend installs in ``node.info["subgraph_runner"]`` (it returns None for a body it
    cannot compile), else with a cached interpreter per graph."""
    from ..interpreter import Interpreter

    runner = node.info.get("subgraph_runner")
    if runner is not None:
        outs = runner(graph, feed)
        if outs is not None:
            return list(outs)
    cache = node.info.setdefault("_interpreters", {})
    interp = cache.get(id(graph))
    if interp is None:
        interp = cache[id(graph)] = Interpreter(graph)
    params = graph.attrs.get("params") or {}
    return interp.run({**params, **feed})


def _names(attrs, key):
    return list(attrs.get(key) or ())


def _common_params(extra=()):
    return [Param("num_args", "int", doc="number of inputs"),
            Param("num_outputs", "int", doc="number of outputs"),
            Param("output_shapes", "any", (), "per output: shape or None (data-dependent)"),
            Param("output_dtypes", "any", (), "per output: dtype name"), *extra]


# -- if_else -----------------------------------------------------------------------------------

def _if_ref(node, cond, *captured):
    a = node.attrs
    n_then = a["num_then_captured"]
    take_then = bool(np.asarray(cond).reshape(-1)[0]) if np.asarray(cond).size else False
    unrunnable = list(a.get("unrunnable") or ("", ""))
    why = unrunnable[0 if take_then else 1] if len(unrunnable) == 2 else ""
    if why:
        branch = "then" if take_then else "else"
        raise ExecutionError(format_error(
            node_where(node), f"the condition selected the {branch} branch, which cannot run "
            f"with the input shapes the model was built for ({why})",
            fix="Build the model with input shapes that branch accepts, or freeze the "
                "condition's inputs at import (from_onnx(freeze=...) / nnvm compile --freeze)"))
    names = _names(a, "then_inputs") if take_then else _names(a, "else_inputs")
    values = captured[:n_then] if take_then else captured[n_then:]
    graph = node.subgraphs[0 if take_then else 1]
    return tuple(_run(node, graph, dict(zip(names, values))))


defs.op(
    "if_else", doc="Run subgraph 0 (then) or 1 (else) on the boolean condition; inputs after "
    "the condition are the values each branch captures (then's first).",
    inputs=lambda attrs: ["cond"] + [f"captured{i}" for i in range(attrs["num_args"] - 1)],
    outputs=lambda attrs: [f"output{i}" for i in range(attrs["num_outputs"])],
    params=_common_params([Param("num_then_captured", "int", 0, "captured inputs of then"),
                           Param("then_inputs", "strs", (), "then's variables, in order"),
                           Param("else_inputs", "strs", (), "else's variables, in order"),
                           Param("unrunnable", "any", (),
                                 "(then, else): why a branch cannot run with the graph's input "
                                 "shapes ('' when it can); such a branch was pruned at import "
                                 "and its slot holds the other branch as a typed stand-in that "
                                 "is never run")]),
    shape=_hint_shape, dtype=_hint_dtype, FReferenceNode=_if_ref, pattern=OpPattern.OPAQUE,
    TDynamicShape=lambda attrs: any(s is None for s in attrs.get("output_shapes") or ()),
    support_level=5)


# -- loop --------------------------------------------------------------------------------------

def _loop_ref(node, trip, cond, *rest):
    a = node.attrs
    nc, ns = a["num_carried"], a["num_scan_outputs"]
    carried, captured = list(rest[:nc]), list(rest[nc:])
    names = _names(a, "body_inputs")
    body = node.subgraphs[0]
    max_trip = int(np.asarray(trip).reshape(-1)[0]) if np.asarray(trip).size else _MAX_ITERATIONS
    keep_going = bool(np.asarray(cond).reshape(-1)[0]) if np.asarray(cond).size else True
    scans: list[list[np.ndarray]] = [[] for _ in range(ns)]
    i = 0
    while i < max_trip and keep_going:
        feed = dict(zip(names, [np.array(i, dtype=np.int64), np.array(keep_going)] + carried +
                        captured))
        outs = _run(node, body, feed)
        keep_going = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = [np.asarray(o) for o in outs[1:1 + nc]]
        for k in range(ns):
            scans[k].append(np.asarray(outs[1 + nc + k]))
        i += 1
        if i >= _MAX_ITERATIONS:
            raise ExecutionError(format_error(node_where(node), "loop did not terminate"))
    results = list(carried)
    dtypes = list(a.get("output_dtypes") or ())
    elem = list(a.get("scan_elem_shapes") or ())
    for k in range(ns):
        if scans[k]:
            results.append(np.stack(scans[k]))
        else:
            shape = elem[k] if k < len(elem) and elem[k] is not None else ()
            dt = dtypes[nc + k] if nc + k < len(dtypes) and dtypes[nc + k] else "float32"
            results.append(np.zeros((0, *shape), dtype=dt))
    return tuple(results)


defs.op(
    "loop", doc="ONNX Loop: run the body while iteration < trip_count and cond; outputs the "
    "final carried values, then each scan output stacked over iterations.",
    inputs=lambda attrs: ["trip_count", "cond"] + [f"carried{i}" for i in range(
        attrs["num_carried"])] + [f"captured{i}" for i in range(
            attrs["num_args"] - 2 - attrs["num_carried"])],
    outputs=lambda attrs: [f"output{i}" for i in range(attrs["num_outputs"])],
    params=_common_params([Param("num_carried", "int", 0, "loop-carried values"),
                           Param("num_scan_outputs", "int", 0, "per-iteration outputs"),
                           Param("body_inputs", "strs", (), "body variables: iteration, cond, "
                                 "carried..., captured..."),
                           Param("scan_elem_shapes", "any", (), "shape of one scan element")]),
    shape=_hint_shape, dtype=_hint_dtype, FReferenceNode=_loop_ref, pattern=OpPattern.OPAQUE,
    TDynamicShape=lambda attrs: any(s is None for s in attrs.get("output_shapes") or ()),
    support_level=5)


# -- scan --------------------------------------------------------------------------------------

def _scan_ref(node, *ins):
    a = node.attrs
    ns, nx = a["num_states"], a["num_scan_inputs"]
    states, xs, captured = list(ins[:ns]), list(ins[ns:ns + nx]), list(ins[ns + nx:])
    in_axes = list(a["scan_input_axes"]) or [0] * nx
    in_dirs = list(a["scan_input_directions"]) or [0] * nx
    out_axes = list(a["scan_output_axes"])
    out_dirs = list(a["scan_output_directions"])
    names = _names(a, "body_inputs")
    n_out = a["num_outputs"] - ns
    steps = xs[0].shape[in_axes[0]] if xs else 0
    collected: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    for t in range(steps):
        slices = []
        for x, ax, d in zip(xs, in_axes, in_dirs):
            slices.append(np.take(x, steps - 1 - t if d else t, axis=ax))
        outs = _run(node, node.subgraphs[0], dict(zip(names, states + slices + captured)))
        states = [np.asarray(o) for o in outs[:ns]]
        for k in range(n_out):
            collected[k].append(np.asarray(outs[ns + k]))
    results = list(states)
    for k in range(n_out):
        d = out_dirs[k] if k < len(out_dirs) else 0
        parts = collected[k][::-1] if d else collected[k]
        stacked = np.stack(parts) if parts else np.zeros((0,), dtype=np.float32)
        ax = out_axes[k] if k < len(out_axes) else 0
        if ax < 0:
            ax += stacked.ndim
        results.append(np.moveaxis(stacked, 0, ax) if ax else stacked)
    return tuple(results)


defs.op(
    "scan", doc="ONNX Scan: iterate the body over slices of the scan inputs, threading state; "
    "outputs the final states, then the stacked per-step outputs.",
    inputs=lambda attrs: [f"input{i}" for i in range(attrs["num_args"])],
    outputs=lambda attrs: [f"output{i}" for i in range(attrs["num_outputs"])],
    params=_common_params([Param("num_states", "int", 0, "state variables"),
                           Param("num_scan_inputs", "int", 1, "inputs sliced per step"),
                           Param("scan_input_axes", "ints", (), "axis sliced per scan input"),
                           Param("scan_input_directions", "ints", (), "1 = reverse"),
                           Param("scan_output_axes", "ints", (), "axis stacked per output"),
                           Param("scan_output_directions", "ints", (), "1 = reverse"),
                           Param("body_inputs", "strs", (), "body variables: states..., "
                                 "slices..., captured...")]),
    shape=_hint_shape, dtype=_hint_dtype, FReferenceNode=_scan_ref, pattern=OpPattern.OPAQUE,
    support_level=5)
