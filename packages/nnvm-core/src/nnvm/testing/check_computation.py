"""Check an op's rules, reference kernel and gradient with the reference interpreter.

``check_function`` infers shapes and dtypes for one op node (or a symbol), runs it with
``Interpreter(check=True)`` (so a kernel that disagrees with its own shape or dtype rule fails)
and compares with an independent NumPy computation. ``check_gradient`` builds the gradient
graph of ONE node by calling the op's ``FGradient`` with out-grad variables, evaluates those
entries with the interpreter, and compares them with central finite differences of
``sum(output_i * out_grad_i)`` over the visible outputs. It does not need the Gradient pass, so
it tests op records in isolation.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import NNVMError, ShapeError, TypeInferenceError, format_error
from ..interpreter import Interpreter
from ..ir import Graph, Node, NodeEntry, make_node
from ..op import get_op
from ..symbol import Symbol

OpOrSymbol = str | Symbol


def build_op_graph(op_name: str, attrs: Mapping[str, Any] | None = None,
                   input_names: Sequence[str] | None = None, name: str = "node") -> Graph:
    """A graph of one ``op_name`` node whose inputs are variables named after the op's inputs.

    The graph outputs are *all* the node's outputs (hidden ones included), in order.
    """
    op = get_op(op_name)
    attrs = dict(attrs or {})
    if op.is_variadic and "num_args" not in attrs and input_names is not None:
        attrs["num_args"] = len(input_names)
    parsed = op.parse_attrs(attrs, f"node '{name}' (op {op.name})")
    names = list(input_names) if input_names is not None else op.input_names(parsed)
    variables = [NodeEntry(Node(None, n), 0, 0) for n in names]
    node = make_node(op.name, variables, parsed, name)
    return Graph([NodeEntry(node, i, 0) for i in range(node.num_outputs)])


def infer_graph(graph: Graph, shapes: Mapping[str, tuple], dtypes: Mapping[str, str],
                require_known: bool = True) -> Graph:
    """Run InferShape and InferType seeded with input shapes and dtypes.

    Raises:
        ShapeError / TypeInferenceError: a rule failed, or (``require_known``) some entry is
            still unknown, naming the first such node.
    """
    g = graph.apply(["InferShape", "InferType"], shape_inputs=dict(shapes),
                    dtype_inputs=dict(dtypes))
    if require_known:
        from ..passes.infer_engine import first_unknown

        if g.attrs["shape_num_unknown_nodes"]:
            raise ShapeError(format_error(first_unknown(g, "shape") or "graph",
                                          "shape not inferred", fix="check the shape rule"))
        if g.attrs["dtype_num_unknown_nodes"]:
            raise TypeInferenceError(format_error(first_unknown(g, "dtype") or "graph",
                                                  "dtype not inferred",
                                                  fix="check the dtype rule"))
    return g


def _head_graph(target: OpOrSymbol, attrs, names) -> tuple[Graph, Node]:
    if isinstance(target, Symbol):
        g = Graph(target.outputs)
        node = target.outputs[0].node
        if node.op is None:
            raise NNVMError("check: the symbol's head is a variable; give an op symbol")
        return g, node
    g = build_op_graph(target, attrs, names)
    return g, g.outputs[0].node


def _feed(node: Node, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
    names = [e.node.name for e in node.inputs]
    if isinstance(inputs, Mapping):
        return {k: np.asarray(v) for k, v in inputs.items()}
    if len(inputs) != len(names):
        raise NNVMError(format_error(f"check of op {node.op.name}", "wrong number of inputs",
                                     len(names), len(inputs), fix=f"inputs: {names}"))
    return {n: np.asarray(v) for n, v in zip(names, inputs)}


def _names_for(target: OpOrSymbol, attrs, inputs) -> list[str] | None:
    if isinstance(target, Symbol) or not isinstance(inputs, Mapping):
        if not isinstance(target, Symbol) and get_op(target).is_variadic:
            return [f"arg{i}" for i in range(len(inputs))]
        return None
    op = get_op(target)
    if op.is_variadic:
        return list(inputs)
    return None


def check_function(target: OpOrSymbol, inputs: Mapping[str, Any] | Sequence[Any],
                   attrs: Mapping[str, Any] | None = None,
                   reference: Callable[..., Any] | Sequence[np.ndarray] | None = None,
                   rtol: float = 1e-5, atol: float = 1e-6) -> list[np.ndarray]:
    """Infer, run and (optionally) compare one op or symbol with a NumPy reference.

    Args:
        target: an op name (one node with variable inputs) or a Symbol.
        inputs: arrays by variable name, or positionally in the op's input order.
        attrs: op attributes (op-name targets only).
        reference: expected outputs (arrays), or ``f(*inputs) -> array | tuple`` written
            independently of the op's kernel; compared to the visible outputs.

    Returns:
        The visible outputs computed by the interpreter.

    Raises:
        AssertionError: a shape, dtype or value mismatch.
    """
    graph, node = _head_graph(target, attrs, _names_for(target, attrs, inputs))
    feed = _feed(node, inputs)
    g = infer_graph(graph, {k: v.shape for k, v in feed.items()},
                    {k: v.dtype.name for k, v in feed.items()})
    outs = Interpreter(g, check=True).run(feed)
    if not isinstance(target, Symbol):
        outs = outs[:node.op.num_visible_outputs(node.attrs)]
    idx, shapes, dtypes = g.index, g.attrs["shape"], g.attrs["dtype"]
    for k, (e, o) in enumerate(zip(idx.output_entries, outs)):
        assert tuple(o.shape) == tuple(shapes[e]), f"output {k}: shape {o.shape} != rule " \
                                                   f"{shapes[e]}"
        assert o.dtype.name == dtypes[e], f"output {k}: dtype {o.dtype} != rule {dtypes[e]}"
    if reference is not None:
        if callable(reference):
            ordered = [feed[e.node.name] for e in node.inputs]
            expected = reference(*ordered)
        else:
            expected = reference
        if not isinstance(expected, (tuple, list)):
            expected = (expected,)
        assert len(expected) == len(outs), f"{len(expected)} expected outputs, got {len(outs)}"
        for k, (o, x) in enumerate(zip(outs, expected)):
            x = np.asarray(x)
            assert o.shape == x.shape, f"output {k}: shape {o.shape} != reference {x.shape}"
            np.testing.assert_allclose(o, x, rtol=rtol, atol=atol,
                                       err_msg=f"output {k} of {node.op.name}")
    return outs


def numeric_gradient(f: Callable[[dict[str, np.ndarray]], float], feed: dict[str, np.ndarray],
                     name: str, eps: float = 1e-6) -> np.ndarray:
    """Central finite difference of scalar ``f(feed)`` with respect to ``feed[name]``."""
    x = feed[name]
    grad = np.zeros(x.shape, dtype=np.float64)
    flat = x.reshape(-1)
    for j in range(flat.size):
        old = flat[j]
        flat[j] = old + eps
        plus = f(feed)
        flat[j] = old - eps
        minus = f(feed)
        flat[j] = old
        grad.reshape(-1)[j] = (plus - minus) / (2 * eps)
    return grad


def check_gradient(target: OpOrSymbol, inputs: Mapping[str, Any] | Sequence[Any],
                   attrs: Mapping[str, Any] | None = None, *, wrt: Sequence[str] | None = None,
                   out_grads: Sequence[np.ndarray] | None = None, eps: float = 1e-6,
                   rtol: float = 1e-5, atol: float = 1e-7, seed: int = 0
                   ) -> dict[str, np.ndarray | None]:
    """Compare one node's FGradient with central finite differences.

    The loss is ``sum_i sum(output_i * out_grad_i)`` over the visible outputs (hidden outputs,
    such as batch_norm's saved statistics, receive zero out-grads, as in NNVM). Inputs should be
    float64 and away from kinks (max ties, relu at 0). A ``None`` gradient is checked to be
    numerically zero.

    Args:
        target: an op name or a Symbol whose head node reads variables only.
        inputs: arrays by variable name or positionally.
        attrs: op attributes (op-name targets).
        wrt: the input names to check (default: every floating-point input).
        out_grads: out-grad arrays per visible output (default: random normal).

    Returns:
        ``{input name: analytic gradient or None}``.

    Raises:
        AssertionError: analytic and numeric gradients differ.
    """
    graph, node = _head_graph(target, attrs, _names_for(target, attrs, inputs))
    for e in node.inputs:
        if e.node.op is not None:
            raise NNVMError(format_error(f"check_gradient of {node.op.name}",
                                         f"input '{e.node.name}' is not a variable",
                                         fix="check one node whose inputs are variables"))
    fgrad = node.op.get_attr("FGradient")
    if fgrad is None:
        raise NNVMError(f"check_gradient: op {node.op.name} has no FGradient")
    feed = {k: np.array(v, copy=True) for k, v in _feed(node, inputs).items()}
    fwd = infer_graph(Graph([NodeEntry(node, i, 0) for i in range(node.num_outputs)]),
                      {k: v.shape for k, v in feed.items()},
                      {k: v.dtype.name for k, v in feed.items()})
    interp = Interpreter(fwd, check=True)
    outs = interp.run(feed)
    visible = node.op.num_visible_outputs(node.attrs)
    rng = np.random.default_rng(seed)
    ogs = []
    for i, o in enumerate(outs):
        if i < visible and out_grads is not None:
            ogs.append(np.asarray(out_grads[i], dtype=o.dtype))
        elif i < visible and np.issubdtype(o.dtype, np.floating):
            ogs.append(rng.standard_normal(o.shape).astype(o.dtype))
        else:
            ogs.append(np.zeros(o.shape, dtype=o.dtype))
    og_names = [f"__out_grad{i}" for i in range(len(outs))]
    og_entries = [NodeEntry(Node(None, n), 0, 0) for n in og_names]
    grads = fgrad(node, og_entries)
    names = [e.node.name for e in node.inputs]
    assert len(grads) == len(names), f"FGradient of {node.op.name} returned {len(grads)} " \
                                     f"entries for {len(names)} inputs"

    def loss(fd: dict[str, np.ndarray]) -> float:
        res = interp.run(fd)
        return float(sum(np.sum(r.astype(np.float64) * g) for r, g in zip(res, ogs)))

    present = [(n, g) for n, g in zip(names, grads) if g is not None]
    analytic: dict[str, np.ndarray | None] = {n: None for n in names}
    if present:
        full = dict(feed, **dict(zip(og_names, ogs)))
        ggraph = Graph([g for _, g in present])
        used = set(ggraph.index.input_names)
        gfeed = {k: v for k, v in full.items() if k in used}
        gg = infer_graph(ggraph, {k: v.shape for k, v in gfeed.items()},
                         {k: v.dtype.name for k, v in gfeed.items()})
        values = Interpreter(gg, check=True).run(gfeed)
        for (n, _), v in zip(present, values):
            analytic[n] = v
    check = list(wrt) if wrt is not None else [
        n for n in names if np.issubdtype(feed[n].dtype, np.floating)]
    for n in check:
        numeric = numeric_gradient(loss, feed, n, eps)
        got = analytic[n]
        if got is None:
            np.testing.assert_allclose(numeric, 0.0, atol=max(atol, 1e-6), err_msg=(
                f"{node.op.name}: FGradient gives no gradient for '{n}', but finite "
                f"differences are non-zero"))
            continue
        assert got.shape == feed[n].shape, f"{node.op.name}: gradient of '{n}' has shape " \
                                           f"{got.shape}; expected {feed[n].shape}"
        np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"{node.op.name}: gradient of '{n}'")
    return analytic


# -- table-driven op cases ---------------------------------------------------------------------

class OpCase:
    """One op test case: inputs, attributes and an independent NumPy reference.

    Args:
        op: the op name.
        inputs: per input, a shape (random normal floats), or an array used as given.
        attrs: op attributes.
        reference: ``f(*inputs) -> array | tuple`` written independently of the kernel.
        grad: check the FGradient against finite differences (float64).
        wrt: input names whose gradient is checked (default: all float inputs).
        positive: draw random inputs in [0.5, 1.5) (log, sqrt, pow domains).
        keep_dtype: indices of array inputs whose dtype is kept (others float -> the run's).
        out_dtypes: expected output dtypes for float32 inputs (default: the first input's).
        id: a label for test ids.
    """

    def __init__(self, op: str, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None,
                 reference: Callable[..., Any] | None = None, *, grad: bool = True,
                 wrt: Sequence[str] | None = None, positive: bool = False,
                 out_dtypes: Sequence[str] | None = None, id: str | None = None,
                 rtol: float = 1e-5, seed: int = 0, keep_dtype: Sequence[int] = ()):
        self.op, self.inputs, self.attrs = op, list(inputs), dict(attrs or {})
        self.reference, self.grad, self.wrt = reference, grad, wrt
        self.positive, self.out_dtypes, self.rtol, self.seed = positive, out_dtypes, rtol, seed
        self.id = id or op
        self.keep_dtype = tuple(keep_dtype)

    def __repr__(self) -> str:
        return f"OpCase({self.id})"

    def arrays(self, float_dtype: str) -> list[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        out = []
        for k, spec in enumerate(self.inputs):
            if isinstance(spec, np.ndarray):
                a = spec
            else:
                a = rng.standard_normal(tuple(spec))
                if self.positive:
                    a = np.abs(a) % 1.0 + 0.5
            if np.issubdtype(a.dtype, np.floating) and k not in self.keep_dtype:
                a = a.astype(float_dtype)
            out.append(a)
        return out


def check_case_forward(case: OpCase) -> list[np.ndarray]:
    """Shape rule, dtype rule and kernel of ``case`` in float32 against its NumPy reference."""
    arrays = case.arrays("float32")
    ref = None
    if case.reference is not None:
        def ref(*xs):
            wide = [x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x
                    for x in xs]
            return case.reference(*wide)
    outs = check_function(case.op, arrays, case.attrs, reference=ref, rtol=max(case.rtol, 1e-4),
                          atol=1e-5)
    want = case.out_dtypes or [arrays[0].dtype.name if arrays else "float32"] * len(outs)
    assert [o.dtype.name for o in outs] == list(want), \
        f"{case.id}: output dtypes {[o.dtype.name for o in outs]}; expected {list(want)}"
    return outs


def check_case_gradient(case: OpCase, eps: float = 1e-6) -> dict:
    """FGradient of ``case`` against central finite differences in float64."""
    return check_gradient(case.op, case.arrays("float64"), case.attrs, wrt=case.wrt, eps=eps,
                          rtol=case.rtol, atol=1e-7)


def check_shape_error(op_name: str, shapes: Sequence[tuple | None],
                      attrs: Mapping[str, Any] | None = None, match: str = "",
                      node_name: str = "probe_node") -> str:
    """Inputs with contradicting shapes must raise a ShapeError naming the node.

    Args:
        shapes: per input, a shape or None (left for the rule to infer).
        match: a substring the message must contain as well.

    Returns:
        The error message.
    """
    names = [f"arg{i}" for i in range(len(shapes))] if get_op(op_name).is_variadic else None
    g = build_op_graph(op_name, attrs, names, name=node_name)
    feed_names = [e.node.name for e in g.outputs[0].node.inputs]
    seeds = {n: tuple(s) for n, s in zip(feed_names, shapes) if s is not None}
    try:
        g.apply("InferShape", shape_inputs=seeds)
    except ShapeError as exc:
        msg = str(exc)
        assert node_name in msg, f"{op_name}: error does not name the node: {msg}"
        assert match in msg, f"{op_name}: error lacks {match!r}: {msg}"
        return msg
    raise AssertionError(f"{op_name}: shapes {shapes} with {attrs} raised no ShapeError")
