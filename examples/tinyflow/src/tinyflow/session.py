"""``Session``: runs TinyFlow graphs with NNVM's compiler and keeps the variables' state.

Per ``run(fetches, feed_dict)``:

1. The fetched symbols, plus every ``assign`` reachable from them, become the outputs of one
   NNVM graph (an assign buried inside an update, such as Adam's moment, must still be
   written back).
2. Each graph input gets its value: a placeholder from ``feed_dict``, a variable from the
   session state (numpy arrays keyed by variable name). A variable that is only *written*
   (the target of an initialising assign) needs no value; it is bound to zeros of its
   inferred shape.
3. The graph is compiled once per fetch set and input-shape signature with
   ``nnvm.compiler.build`` on the session's target: shape/type inference, the optimisation
   pipeline of nnvm-passes including static memory planning (PlanMemory, with in-place
   updates) and the target's code generation. Later runs with the same shapes reuse it.
4. After the run, each assign's value is stored back into the state.

Variables are graph inputs, never build-time params, so constant folding cannot freeze them.
"""

from __future__ import annotations

import collections
from typing import Any, Mapping

import numpy as np

from nnvm.backend import get_backend, parse_target
from nnvm.compiler import build
from nnvm.compiler.graph_util import infer_dtype, infer_shape
from nnvm.errors import NNVMError, format_error
from nnvm.ir import Graph, NodeEntry, post_order
from nnvm.symbol import Symbol

from ._base import Operation, TinyFlowError, is_placeholder

_ASSIGN = "_assign"
#: compiled modules kept per fetch set (distinct input-shape signatures, LRU)
_MAX_SIGNATURES = 4


class _Executor:
    """One fetch set: its graph and the modules compiled for each input-shape signature."""

    def __init__(self, fetch_entries: list[NodeEntry]):
        op_entries = _unique([e for e in fetch_entries if e.node.op is not None])
        assigns = [n for n in post_order(e.node for e in fetch_entries)
                   if n.op is not None and n.op.name == _ASSIGN]
        outputs = _unique(op_entries + [NodeEntry(n, 0, 0) for n in assigns])
        self.graph = Graph(outputs) if outputs else None
        self.position = {(id(e.node), e.index): i for i, e in enumerate(outputs)}
        self.assigns = [(n.inputs[0].node.name, self.position[(id(n), 0)]) for n in assigns]
        self.fetch_entries = fetch_entries  # keeps the nodes (and their ids) alive
        self.modules: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
        self.inputs = [] if self.graph is None else \
            [self.graph.index.nodes[i] for i in self.graph.index.input_nodes]
        self.value_free = _value_free_inputs(self.graph) if self.graph is not None else set()


def _unique(entries: list[NodeEntry]) -> list[NodeEntry]:
    seen, out = set(), []
    for e in entries:
        key = (id(e.node), e.index)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _value_free_inputs(graph: Graph) -> set[str]:
    """Names of inputs whose every use ignores the value (FIgnoreInputs, e.g. assign's lhs)."""
    idx = graph.index
    used: set[str] = set()
    for node in idx.nodes:
        if node.op is None:
            continue
        f = node.op.get_attr("FIgnoreInputs")
        ignored = set(f(node.attrs)) if f is not None else set()
        for i, e in enumerate(node.inputs):
            if e.node.op is None and i not in ignored:
                used.add(e.node.name)
    for nid, _, _ in idx.outputs:
        if idx.nodes[nid].op is None:
            used.add(idx.nodes[nid].name)
    return {idx.nodes[i].name for i in idx.input_nodes} - used


class Session:
    """Runs fetches on an NNVM target, holding variables as state.

    Args:
        target: an NNVM target string: ``"reference"`` (NumPy interpreter, always there),
            ``"llvm"`` (when its plugin and apache-tvm are installed) or any other installed
            backend, with options (``"llvm -num-threads=2"``). Checked here, so an
            unavailable target fails at once with the backend's reason.
        opt_level: NNVM optimisation level for every build (memory planning runs at every
            level when nnvm-passes is installed).
        config: TinyFlow's ``'cpu'`` is accepted as an alias of ``"reference"``.
    """

    def __init__(self, target: str = "reference", opt_level: int = 2, config: str | None = None):
        if config is not None:
            if config != "cpu":
                raise TinyFlowError(format_error("Session", f"config {config!r} is not "
                                                 "supported", "'cpu'", fix="Pass target="
                                                 "'reference' or 'llvm' instead"))
            target = "reference"
        tgt = parse_target(target)
        backend = get_backend(tgt.kind)
        reason = getattr(backend, "compiler_available", lambda: None)()
        if reason is not None:
            from nnvm.errors import BackendUnavailableError

            raise BackendUnavailableError(f"target '{tgt.kind}' cannot build here: {reason}")
        self.target = str(tgt)
        self.opt_level = opt_level
        self.variables: dict[str, np.ndarray] = {}
        self._executors: dict[tuple, _Executor] = {}
        self.num_builds = 0

    # -- state ------------------------------------------------------------------------------
    def set_variable(self, var: Symbol | str, value: Any) -> None:
        """Set a variable's value directly (no graph), e.g. from a checkpoint."""
        self.variables[_var_name(var)] = np.array(value, copy=True)

    def get_variable(self, var: Symbol | str) -> np.ndarray:
        name = _var_name(var)
        if name not in self.variables:
            raise TinyFlowError(format_error(f"Session: variable '{name}'", "is not initialised",
                                             fix="Run tf.initialize_all_variables() first"))
        return self.variables[name]

    # -- running ----------------------------------------------------------------------------
    def run(self, fetches: Any, feed_dict: Mapping | None = None) -> Any:
        """Evaluate ``fetches`` (a symbol, an operation or a list) with ``feed_dict``.

        Returns an array per single-output symbol (a list for a multi-output one), None
        per operation, in the structure of ``fetches``.
        """
        entries = _collect(fetches)
        feed = self._feed(feed_dict)
        values = self._evaluate(entries, feed)
        return _restructure(fetches, values)

    def stats(self, fetches: Any, feed_dict: Mapping | None = None) -> dict[str, Any]:
        """``Module.stats()`` of the executor ``run(fetches, feed_dict)`` uses (built if
        needed): ``activation_bytes`` (memory plan) vs ``activation_bytes_naive``..."""
        ex, module, _ = self._prepare(_collect(fetches), self._feed(feed_dict))
        return {} if module is None else module.stats()

    def close(self) -> None:
        self._executors.clear()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _feed(self, feed_dict: Mapping | None) -> dict[str, np.ndarray]:
        feed = {}
        for key, value in (feed_dict or {}).items():
            name = _var_name(key, what="feed_dict key")
            feed[name] = value
        return feed

    def _prepare(self, entries: list[NodeEntry], feed: dict[str, Any]):
        key = tuple((id(e.node), e.index) for e in entries)
        ex = self._executors.get(key)
        if ex is None:
            ex = self._executors[key] = _Executor(entries)
        if ex.graph is None:
            return ex, None, {}
        inputs, deferred = {}, []
        for node in ex.inputs:
            name = node.name
            if name in feed:
                want = node.attrs.get("dtype")
                arr = np.asarray(feed[name])
                inputs[name] = arr.astype(want) if want and arr.dtype.name != want else arr
            elif is_placeholder(node):
                raise TinyFlowError(format_error(
                    f"Session.run: placeholder '{name}'", "has no value",
                    fix="Give it in feed_dict={placeholder: array}"))
            elif name in self.variables:
                inputs[name] = self.variables[name]
            elif name in ex.value_free:
                deferred.append(node)
            else:
                raise TinyFlowError(format_error(
                    f"Session.run: variable '{name}'", "Attempt to execute a graph "
                    "un-initialized Variable", fix="Run tf.initialize_all_variables() (or "
                    "assign it) before reading it"))
        if deferred:
            inputs.update(self._placeholders_for_writes(ex, inputs, deferred))
        signature = tuple(sorted((k, v.shape, v.dtype.name) for k, v in inputs.items()))
        module = ex.modules.get(signature)
        if module is None:
            module = build(ex.graph, target=self.target, opt_level=self.opt_level,
                           shape={k: v.shape for k, v in inputs.items()},
                           dtype={k: v.dtype.name for k, v in inputs.items()})
            self.num_builds += 1
            ex.modules[signature] = module
            if len(ex.modules) > _MAX_SIGNATURES:
                ex.modules.popitem(last=False)
        else:
            ex.modules.move_to_end(signature)
        return ex, module, inputs

    def _placeholders_for_writes(self, ex: _Executor, inputs: dict, deferred: list) -> dict:
        """Zeros for variables that are only written, shaped by inference from the rest."""
        shapes = {k: v.shape for k, v in inputs.items()}
        dtypes = {k: v.dtype.name for k, v in inputs.items()}
        try:
            in_shapes, _ = infer_shape(ex.graph, **shapes)
            in_dtypes, _ = infer_dtype(ex.graph, **dtypes)
        except NNVMError as exc:
            raise TinyFlowError(f"Session.run: cannot infer the shapes of the variables to "
                                f"initialise: {exc}") from exc
        names = ex.graph.index.input_names
        out = {}
        for node in deferred:
            k = names.index(node.name)
            if in_shapes[k] is None:
                raise TinyFlowError(format_error(
                    f"Session.run: variable '{node.name}'", "its shape cannot be inferred",
                    fix="Assign it a value of known shape (tf.normal(shape)) or feed the "
                        "placeholders that determine it"))
            out[node.name] = np.zeros(in_shapes[k], dtype=in_dtypes[k] or "float32")
        return out

    def _evaluate(self, entries: list[NodeEntry], feed: dict[str, Any]) -> list[Any]:
        ex, module, inputs = self._prepare(entries, feed)
        outs: list[np.ndarray] = []
        if module is not None:
            outs = module.run(**{k: v for k, v in inputs.items() if k in module.input_names})
            for var_name, pos in ex.assigns:
                self.variables[var_name] = np.array(outs[pos], copy=True)
        values = []
        for e in entries:
            if e.node.op is None:
                name = e.node.name
                if name in feed:
                    values.append(np.asarray(feed[name]))
                else:
                    values.append(self.get_variable(name).copy())
            else:
                values.append(np.array(outs[ex.position[(id(e.node), e.index)]], copy=True))
        return values


def _var_name(key: Any, what: str = "variable") -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, Symbol) and len(key.outputs) == 1 and key.outputs[0].node.op is None:
        return key.outputs[0].node.name
    raise TinyFlowError(format_error(what, "must be a placeholder or Variable (or its name)",
                                     got=repr(key), fix="Only graph inputs can be fed"))


def _collect(fetches: Any) -> list[NodeEntry]:
    if isinstance(fetches, Symbol):
        return list(fetches.outputs)
    if isinstance(fetches, (list, tuple)):
        return [e for f in fetches for e in _collect(f)]
    raise TinyFlowError(format_error("Session.run: fetch", "must be a Symbol, an Operation "
                                     "or a list of them", got=type(fetches).__name__))


def _restructure(fetches: Any, values: list[Any]) -> Any:
    it = iter(values)

    def take(f):
        if isinstance(f, Operation):
            for _ in f.outputs:
                next(it)
            return None
        if isinstance(f, Symbol):
            vals = [next(it) for _ in f.outputs]
            return vals[0] if len(vals) == 1 else vals
        return [take(x) for x in f]

    return take(fetches)
