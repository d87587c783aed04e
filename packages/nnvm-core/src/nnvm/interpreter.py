"""The NumPy reference interpreter: the oracle every backend is checked against.

It walks the graph in topological order and calls each op's ``FReference`` kernel, freeing
each intermediate after its last use so that peak memory stays close to the live set.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from .errors import ExecutionError, NNVMError, UnsupportedOpError, format_error, node_where
from .ir import Graph


class Interpreter:
    """Executes a graph with NumPy kernels.

    Args:
        graph: the graph; ``shape``/``dtype`` attributes, when present, are used to check
            inputs and to keep outputs in the inferred dtype.
        check: compare every kernel's output shape and dtype against the inferred ones
            (tests turn it on; it names the node whose kernel disagrees with its rules).
    """

    def __init__(self, graph: Graph, check: bool = False):
        self.graph = graph
        self.check = check
        idx = graph.index
        rptr = idx.entry_rptr
        self._steps = []
        uses = [0] * idx.num_node_entries
        for nid in range(idx.num_nodes):
            for i, k, _ in idx.inputs[nid]:
                uses[rptr[i] + k] += 1
        for e in idx.output_entries:
            uses[e] += 1
        missing = []
        for nid, node in enumerate(idx.nodes):
            if node.op is None:
                continue
            kernel = reference_kernel(node.op)
            if kernel is None:
                missing.append(node_where(node))
                continue
            ins = [rptr[i] + k for i, k, _ in idx.inputs[nid]]
            outs = list(range(rptr[nid], rptr[nid + 1]))
            self._steps.append((nid, node, kernel, ins, outs))
        if missing:
            raise UnsupportedOpError(format_error(
                "reference target", "no NumPy reference kernel (FReference)",
                fix=f"for {', '.join(missing[:5])}; a plugin adds one by returning "
                    "OpAttrDef(op, 'FReference', kernel) from its nnvm_ops hook"))
        self._uses = uses
        dtypes = graph.attrs.get("dtype")
        #: per entry, the inferred dtype as a NumPy dtype (None: unknown), compared with each
        #: kernel's result: ``dtype.name`` is a Python-level property, and on a host tail of
        #: a thousand small steps its cost per output showed in the profile
        self._want = [None] * idx.num_node_entries if dtypes is None else \
            [_want_dtype(d) for d in dtypes]

    def run(self, feed: Mapping[str, Any]) -> list[np.ndarray]:
        """Run with ``feed`` mapping every variable name to an array; returns the outputs."""
        idx = self.graph.index
        rptr = idx.entry_rptr
        shapes = self.graph.attrs.get("shape")
        dtypes = self.graph.attrs.get("dtype")
        want = self._want
        vals: list[Any] = [None] * idx.num_node_entries
        for nid in idx.input_nodes:
            node = idx.nodes[nid]
            if node.name not in feed:
                raise ExecutionError(format_error(
                    f"input '{node.name}'", "no value was given",
                    fix=f"Inputs: {', '.join(idx.input_names)}"))
            vals[rptr[nid]] = feed[node.name]
        remaining = list(self._uses)
        for nid, node, kernel, ins, outs in self._steps:
            args = [vals[e] for e in ins]
            try:
                res = kernel(node, *args)
            except NNVMError:
                raise
            except Exception as exc:  # a kernel crashed: say which node, with input shapes
                shp = [getattr(a, "shape", None) for a in args]
                raise ExecutionError(format_error(node_where(node), f"reference kernel failed: "
                                                  f"{exc!r}", fix=f"input shapes {shp}")) from exc
            if not isinstance(res, (tuple, list)):
                res = (res,)
            if len(res) != len(outs):
                raise ExecutionError(format_error(node_where(node), "kernel returned the wrong "
                                                  "number of outputs", len(outs), len(res)))
            for e, r in zip(outs, res):
                r = np.asarray(r)
                if want[e] is not None and r.dtype != want[e]:
                    if self.check:
                        raise ExecutionError(format_error(node_where(node), "kernel dtype "
                                                          "disagrees with FInferType",
                                                          dtypes[e], r.dtype.name))
                    r = r.astype(_np_dtype(dtypes[e]))
                if self.check and shapes is not None and shapes[e] is not None and \
                        tuple(r.shape) != tuple(shapes[e]):
                    raise ExecutionError(format_error(node_where(node), "kernel shape "
                                                      "disagrees with FInferShape",
                                                      tuple(shapes[e]), r.shape))
                vals[e] = r
            for e in ins:
                remaining[e] -= 1
                if remaining[e] == 0:
                    vals[e] = None
        return [vals[e] for e in idx.output_entries]


def reference_kernel(op) -> Callable[..., Any] | None:
    """The op's NumPy kernel as ``f(node, *arrays)``: ``FReferenceNode`` when the op needs its
    node (subgraphs), else ``FReference`` bound to the node's attrs; None if it has neither."""
    kernel = op.get_attr("FReferenceNode")
    if kernel is not None:
        return kernel
    plain = op.get_attr("FReference")
    return None if plain is None else (lambda node, *args: plain(node.attrs, *args))


def run_reference(node, *args) -> tuple:
    """Run one node's reference kernel; the outputs as a tuple. Backends use it for the ops
    they have no kernel for (counted host fallbacks).

    Raises:
        ExecutionError: naming the node, when the op has no kernel or the kernel fails.
    """
    kernel = reference_kernel(node.op)
    if kernel is None:
        raise ExecutionError(format_error(node_where(node), "has no reference kernel"))
    try:
        res = kernel(node, *args)
    except NNVMError:
        raise
    except Exception as exc:
        raise ExecutionError(format_error(node_where(node), f"reference kernel failed: "
                                          f"{exc!r}")) from exc
    return tuple(res) if isinstance(res, (tuple, list)) else (res,)


def _want_dtype(name: str | None):
    """``name``'s NumPy dtype; the name itself where NumPy cannot resolve it here (a result
    then differs from it, and converting it raises as the run needs it); None: unknown."""
    if name is None:
        return None
    try:
        return _np_dtype(name)
    except ExecutionError:
        return name


def _np_dtype(name: str):
    from .dtypes import np_dtype

    try:
        return np_dtype(name)
    except NNVMError as exc:
        raise ExecutionError(str(exc)) from None


def run_graph(graph: Graph, feed: Mapping[str, Any], check: bool = False) -> list[np.ndarray]:
    """Convenience: interpret ``graph`` once."""
    return Interpreter(graph, check=check).run(feed)
