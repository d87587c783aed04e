"""Export an optimised NNVM graph to ONNX, so Netron (or onnxruntime) can open it.

Why: after folding, layout changes and fusion the graph a target runs is not the model that
was imported; users look at graphs in Netron, which reads ONNX. ``export_onnx`` writes the
graph as it will run:

- every op with an ONNX equivalent becomes that ONNX node (``_CONVERTERS``); where the graph
  has inferred shapes the exporter uses them (a ``reshape`` becomes ``Reshape`` to the
  inferred shape, whatever NNVM's special codes in its attribute were);
- an op with none (``__layout_transform__``, ``_contrib_conv2d_NCHWc``...) becomes a node of
  the custom domain ``ai.nnvm`` with the op's name and its attributes, so Netron shows
  what it is and its settings (onnxruntime cannot run such a model, by design);
- each fused group (FuseOps' ``group_root``) of more than one op becomes a call to a
  model-local ONNX function (domain ``ai.nnvm.fused``) whose body holds the group's ops:
  Netron shows one node per kernel, which opens to its ops, and onnxruntime inlines the
  functions, so a model whose ops all map runs there and can be checked against the
  original;
- params become initializers, and every edge gets its shape and dtype (``value_info``).

Core cannot import onnx, so this lives in the ONNX frontend; the CLI reaches it through the
``nnvm export-onnx`` subcommand this package adds (``nnvm_add_cli_commands``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from nnvm.errors import NNVMError, format_error

#: custom domain of ops without an ONNX equivalent, and of the fused-kernel functions
CUSTOM_DOMAIN = "ai.nnvm"
FUSED_DOMAIN = "ai.nnvm.fused"
OPSET = 18

_UNARY = {
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
    "sqrt": "Sqrt", "negative": "Neg", "abs": "Abs", "floor": "Floor", "ceil": "Ceil",
    "round": "Round", "erf": "Erf", "sin": "Sin", "cos": "Cos", "reciprocal": "Reciprocal",
    "sign": "Sign", "copy": "Identity", "isnan": "IsNaN", "logical_not": "Not",
    "softplus": "Softplus", "softsign": "Softsign", "dropout": "Identity",
    "block_grad": "Identity",
}
_BINARY = {
    "elemwise_add": "Add", "broadcast_add": "Add", "elemwise_sub": "Sub",
    "broadcast_sub": "Sub", "elemwise_mul": "Mul", "broadcast_mul": "Mul",
    "elemwise_div": "Div", "broadcast_div": "Div", "broadcast_pow": "Pow",
    "broadcast_maximum": "Max", "broadcast_minimum": "Min", "broadcast_equal": "Equal",
    "broadcast_greater": "Greater", "broadcast_less": "Less",
    "broadcast_greater_equal": "GreaterOrEqual", "broadcast_less_equal": "LessOrEqual",
    "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor", "where": "Where",
}
#: ``x op scalar`` and the reversed ``scalar op x``
_SCALAR = {"__add_scalar__": ("Add", False), "__sub_scalar__": ("Sub", False),
           "__mul_scalar__": ("Mul", False), "__div_scalar__": ("Div", False),
           "__pow_scalar__": ("Pow", False), "__rsub_scalar__": ("Sub", True),
           "__rdiv_scalar__": ("Div", True), "__rpow_scalar__": ("Pow", True)}
_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin",
           "prod": "ReduceProd"}


class _Node:
    """What a converter sees: the NNVM node, its ONNX input/output names, shapes, dtypes."""

    def __init__(self, node, inputs, outputs, in_shapes, out_shapes, in_dtypes, make_const):
        self.op = node.op.name
        self.attrs = node.attrs
        self.name = node.name
        self.inputs, self.outputs = inputs, outputs
        self.in_shapes, self.out_shapes, self.in_dtypes = in_shapes, out_shapes, in_dtypes
        self.const = make_const  # (value) -> (name, [Constant node])

    def onnx(self, op_type: str, inputs=None, **attrs) -> onnx.NodeProto:
        return helper.make_node(op_type, list(self.inputs if inputs is None else inputs),
                                list(self.outputs), name=self.name, **attrs)


Converter = Callable[[_Node], "list[onnx.NodeProto] | None"]


def _pads(padding, spatial: int = 2) -> list[int]:
    pad = [int(p) for p in (padding or (0,) * spatial)]
    if len(pad) == spatial:  # NNVM's symmetric (h, w)
        pad = pad + pad
    return pad


def _conv(n: _Node):
    a = n.attrs
    if a.get("layout", "NCHW") != "NCHW" or a.get("kernel_layout", "OIHW") != "OIHW":
        return None
    return [n.onnx("Conv", strides=list(a.get("strides", (1, 1))),
                   pads=_pads(a.get("padding")), dilations=list(a.get("dilation", (1, 1))),
                   group=int(a.get("groups", 1)))]


def _pool(op_type: str):
    def convert(n: _Node):
        a = n.attrs
        if a.get("layout", "NCHW") != "NCHW":
            return None
        extra = {"count_include_pad": int(bool(a.get("count_include_pad", False)))} \
            if op_type == "AveragePool" else {}
        return [n.onnx(op_type, kernel_shape=list(a["pool_size"]),
                       strides=list(a.get("strides", (1, 1))), pads=_pads(a.get("padding")),
                       ceil_mode=int(bool(a.get("ceil_mode", False))), **extra)]
    return convert


def _dense(n: _Node):
    if len(n.in_shapes[0] or ()) != 2:
        return None
    return [n.onnx("Gemm", transB=1)]


def _matmul(n: _Node):
    if n.attrs.get("transpose_a") or n.attrs.get("transpose_b"):
        return None
    return [n.onnx("MatMul")]


def _to_shape(n: _Node):
    """reshape/flatten/expand_dims/squeeze: a Reshape to the inferred output shape."""
    shape = n.out_shapes[0]
    if shape is None:
        return None
    name, nodes = n.const(np.array(shape, "int64"))
    return nodes + [n.onnx("Reshape", [n.inputs[0], name])]


def _scalar(n: _Node):
    op_type, reverse = _SCALAR[n.op]
    value = np.array(n.attrs.get("scalar", 0), dtype=n.in_dtypes[0] or "float32")
    name, nodes = n.const(value)
    ins = [name, n.inputs[0]] if reverse else [n.inputs[0], name]
    return nodes + [n.onnx(op_type, ins)]


def _reduce(n: _Node):
    rank = len(n.in_shapes[0] or ())
    axes = [int(x) % rank for x in (n.attrs.get("axis") or ())] if rank else []
    if not axes:
        axes = list(range(rank))
    if n.attrs.get("exclude"):
        axes = [k for k in range(rank) if k not in axes]
    name, nodes = n.const(np.array(axes, "int64"))
    return nodes + [n.onnx(_REDUCE[n.op], [n.inputs[0], name],
                           keepdims=int(bool(n.attrs.get("keepdims", False))))]


def _clip(n: _Node):
    dtype = n.in_dtypes[0] or "float32"
    lo, lo_nodes = n.const(np.array(n.attrs["a_min"], dtype))
    hi, hi_nodes = n.const(np.array(n.attrs["a_max"], dtype))
    return lo_nodes + hi_nodes + [n.onnx("Clip", [n.inputs[0], lo, hi])]


def _cast(n: _Node):
    to = helper.np_dtype_to_tensor_dtype(np.dtype(n.attrs["dtype"]))
    return [n.onnx("Cast", to=to)]


def _axis_op(op_type: str, key: str = "axis", default: int = -1):
    def convert(n: _Node):
        return [n.onnx(op_type, axis=int(n.attrs.get(key, default)))]
    return convert


def _layer_norm(n: _Node):
    if not n.attrs.get("use_bias", True) and len(n.inputs) > 2:
        return None
    return [n.onnx("LayerNormalization", axis=int(n.attrs.get("axis", -1)),
                   epsilon=float(n.attrs.get("epsilon", 1e-5)))]


def _batch_norm(n: _Node):
    a = n.attrs
    if int(a.get("axis", 1)) != 1 or not a.get("center", True) or not a.get("scale", True) \
            or len(n.outputs) != 1:
        return None
    return [n.onnx("BatchNormalization", epsilon=float(a.get("epsilon", 1e-5)))]


def _transpose(n: _Node):
    axes = n.attrs.get("axes") or ()
    return [n.onnx("Transpose", **({"perm": [int(x) for x in axes]} if axes else {}))]


def _leaky(n: _Node):
    return [n.onnx("LeakyRelu", alpha=float(n.attrs.get("alpha", 0.25)))]


_CONVERTERS: dict[str, Converter] = {
    **{k: (lambda op: lambda n: [n.onnx(op)])(v) for k, v in {**_UNARY, **_BINARY}.items()},
    **{k: _scalar for k in _SCALAR},
    **{k: _reduce for k in _REDUCE},
    **{k: _to_shape for k in ("reshape", "flatten", "expand_dims", "squeeze")},
    "matmul": _matmul,
    "conv2d": _conv,
    "max_pool2d": _pool("MaxPool"),
    "avg_pool2d": _pool("AveragePool"),
    "global_avg_pool2d": lambda n: [n.onnx("GlobalAveragePool")],
    "global_max_pool2d": lambda n: [n.onnx("GlobalMaxPool")],
    "dense": _dense,
    "softmax": _axis_op("Softmax"),
    "log_softmax": _axis_op("LogSoftmax"),
    "concatenate": _axis_op("Concat", default=1),
    "gather": _axis_op("Gather", default=0),
    "transpose": _transpose,
    "clip": _clip,
    "cast": _cast,
    "layer_norm": _layer_norm,
    "batch_norm": _batch_norm,
    "leaky_relu": _leaky,
}


def _attribute_value(value: Any):
    """An NNVM attribute as an ONNX attribute value (strings for what ONNX cannot type)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return [v for v in value] if any(isinstance(v, float) for v in value) else \
            [int(v) for v in value]
    return str(value)


def _custom(n: _Node) -> onnx.NodeProto:
    attrs = {k: _attribute_value(v) for k, v in sorted(n.attrs.items())}
    return helper.make_node(n.op, list(n.inputs), list(n.outputs), name=n.name,
                            domain=CUSTOM_DOMAIN, **attrs)


def _tensor_type(dtype: str | None) -> int:
    if dtype is None:
        return onnx.TensorProto.UNDEFINED
    if dtype == "string":
        return onnx.TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def export_onnx(graph_or_module: Any, params: Mapping[str, Any] | None = None, *,
                name: str = "nnvm", fused: bool = True) -> onnx.ModelProto:
    """The ONNX model of an optimised NNVM graph (or of a module's graph and params).

    Args:
        graph_or_module: an ``nnvm.Graph`` (shape- and type-inferred, optionally fused) or a
            runtime module (its ``graph`` and ``params`` are used).
        params: the graph's params (initializers) when a graph is given.
        name: the ONNX graph's name.
        fused: emit each fused group as a call to a model-local function (see the module
            docstring); False writes every op at top level.
    """
    graph = getattr(graph_or_module, "graph", graph_or_module)
    if params is None:
        params = getattr(graph_or_module, "params", None) or {}
    if not hasattr(graph, "index"):
        raise NNVMError(format_error("export_onnx", "expected an nnvm Graph or a module",
                                     got=type(graph_or_module).__name__,
                                     fix="Pass nnvm.compiler.build(...) or a Graph"))
    return _Exporter(graph, params, name, fused).model()


def save_onnx(graph_or_module: Any, path: str, params: Mapping[str, Any] | None = None,
              **kw: Any) -> onnx.ModelProto:
    """``export_onnx`` and write the model to ``path``; returns it."""
    model = export_onnx(graph_or_module, params, **kw)
    onnx.save(model, path)
    return model


class _Exporter:
    def __init__(self, graph, params: Mapping[str, Any], name: str, fused: bool):
        self.graph, self.params, self.name = graph, dict(params), name
        idx = self.idx = graph.index
        self.shapes = graph.attrs.get("shape") or [None] * idx.num_node_entries
        self.dtypes = graph.attrs.get("dtype") or [None] * idx.num_node_entries
        roots = graph.attrs.get("group_root") if fused else None
        self.roots = roots if roots is not None and len(roots) == idx.num_nodes else None
        self.consts = 0
        self.custom_used = False
        from nnvm.runtime.module import output_names_of

        self.out_names = output_names_of(graph)
        self.names = self._entry_names()

    def _entry_names(self) -> list[str]:
        """ONNX value names: inputs and params keep theirs, an op's outputs are its node's
        name (``name:k`` for several), and each graph output produced by an op takes the
        model's own output name (a name clashing with it gets a suffix)."""
        idx, rptr = self.idx, self.idx.entry_rptr
        names = [""] * idx.num_node_entries
        for nid, node in enumerate(idx.nodes):
            count = rptr[nid + 1] - rptr[nid]
            for k in range(count):
                names[rptr[nid] + k] = node.name if count == 1 else f"{node.name}:{k}"
        inputs = {rptr[n] for n in idx.input_nodes}
        self.renamed: set[int] = set()
        for out, e in zip(self.out_names, idx.output_entries):
            if e not in inputs and e not in self.renamed and out not in names:
                names[e] = out
                self.renamed.add(e)
        clash = set(self.out_names)
        return [n + "_nnvm" if n in clash and e not in self.renamed and e not in inputs
                else n for e, n in enumerate(names)]

    def _const(self, value: np.ndarray):
        self.consts += 1
        name = f"nnvm_const_{self.consts}"
        return name, [helper.make_node("Constant", [], [name], name=name,
                                       value=numpy_helper.from_array(np.asarray(value), name))]

    def _convert(self, nid: int) -> list[onnx.NodeProto]:
        idx, rptr = self.idx, self.idx.entry_rptr
        node = idx.nodes[nid]
        ins = [rptr[i] + k for i, k, _ in idx.inputs[nid]]
        outs = list(range(rptr[nid], rptr[nid + 1]))
        view = _Node(node, [self.names[e] for e in ins], [self.names[e] for e in outs],
                     [self.shapes[e] for e in ins], [self.shapes[e] for e in outs],
                     [self.dtypes[e] for e in ins], self._const)
        convert = _CONVERTERS.get(node.op.name)
        nodes = convert(view) if convert is not None else None
        if nodes is None:
            self.custom_used = True
            nodes = [_custom(view)]
        return nodes

    def _value_info(self, e: int):
        shape = self.shapes[e]
        return helper.make_tensor_value_info(self.names[e], _tensor_type(self.dtypes[e]),
                                             None if shape is None else list(shape))

    def model(self) -> onnx.ModelProto:
        idx, rptr = self.idx, self.idx.entry_rptr
        members: dict[int, list[int]] = {}
        for nid, node in enumerate(idx.nodes):
            if node.op is not None:
                root = self.roots[nid] if self.roots is not None and self.roots[nid] >= 0 \
                    else nid
                members.setdefault(root, []).append(nid)
        used_outside = self._consumers()
        nodes, functions = [], []
        emitted: set[int] = set()
        for nid, node in enumerate(idx.nodes):
            if node.op is None or nid in emitted:
                continue
            root = self.roots[nid] if self.roots is not None and self.roots[nid] >= 0 else nid
            group = members.get(root, [nid])
            if len(group) < 2:
                nodes += self._convert(nid)
                emitted.add(nid)
                continue
            call, func = self._function(root, group, used_outside)
            nodes.append(call)
            functions.append(func)
            emitted.update(group)
        nodes += self._output_identities()
        inputs = [self._value_info(rptr[n]) for n in idx.input_nodes
                  if idx.nodes[n].name not in self.params]
        outputs = [helper.make_tensor_value_info(
            name, _tensor_type(self.dtypes[e]),
            None if self.shapes[e] is None else list(self.shapes[e]))
            for name, e in zip(self.out_names, idx.output_entries)]
        inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in self.params.items()
                 if k in set(idx.input_names)]
        internal = [self._value_info(e) for nid, node in enumerate(idx.nodes)
                    if node.op is not None for e in range(rptr[nid], rptr[nid + 1])
                    if e not in self.renamed]
        graph = helper.make_graph(nodes, self.name, inputs, outputs, initializer=inits,
                                  value_info=internal)
        opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(FUSED_DOMAIN, 1)]
        if self.custom_used:
            opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
        model = helper.make_model(graph, opset_imports=opsets, functions=functions,
                                  producer_name="nnvm")
        model.ir_version = 8  # onnxruntime 1.x reads IR 8 with opset 18
        return model

    def _consumers(self) -> dict[int, set[int]]:
        """Entry -> the nodes that read it (graph outputs count as node -1)."""
        idx, rptr = self.idx, self.idx.entry_rptr
        users: dict[int, set[int]] = {}
        for nid in range(idx.num_nodes):
            for i, k, _ in idx.inputs[nid]:
                users.setdefault(rptr[i] + k, set()).add(nid)
        for e in idx.output_entries:
            users.setdefault(e, set()).add(-1)
        return users

    def _function(self, root: int, group: list[int], users: dict[int, set[int]]):
        """One fused group as a function call node and its FunctionProto."""
        idx, rptr = self.idx, self.idx.entry_rptr
        inside = set(group)
        produced = {e for nid in group for e in range(rptr[nid], rptr[nid + 1])}
        ins = list(dict.fromkeys(rptr[i] + k for nid in group for i, k, _ in idx.inputs[nid]
                                 if rptr[i] + k not in produced))
        outs = [e for e in sorted(produced) if users.get(e, set()) - inside]
        body = [n for nid in group for n in self._convert(nid)]
        ops = "_".join(dict.fromkeys(idx.nodes[n].op.name.strip("_") for n in group))
        fname = f"kernel_{idx.nodes[root].name}_{ops}"[:120]
        opsets = [helper.make_opsetid("", OPSET)]
        if any(n.domain == CUSTOM_DOMAIN for n in body):
            opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
        func = helper.make_function(FUSED_DOMAIN, fname, [self.names[e] for e in ins],
                                    [self.names[e] for e in outs], body, opsets)
        call = helper.make_node(fname, [self.names[e] for e in ins],
                                [self.names[e] for e in outs], name=f"kernel_{root}",
                                domain=FUSED_DOMAIN)
        return call, func

    def _output_identities(self) -> list[onnx.NodeProto]:
        """Graph outputs under the model's own names (an Identity from the entry)."""
        return [helper.make_node("Identity", [self.names[e]], [name], name=f"output_{name}")
                for name, e in zip(self.out_names, self.idx.output_entries)
                if self.names[e] != name]


def cmd_export_onnx(args) -> int:
    """``nnvm export-onnx MODEL -o OUT.onnx``: the graph a build would run (an artifact's, or
    an imported model optimised at ``--opt-level``) written as ONNX."""
    import os

    from nnvm.cli import CLIError, Progress, check_output_path, load_model, parse_dtype, \
        parse_shapes
    from nnvm.compiler import optimize
    from nnvm.runtime.artifact import read_artifact

    path = args.model
    out = args.output or os.path.splitext(os.path.basename(path))[0] + ".optimized.onnx"
    check_output_path(out)
    if path.endswith(".nnvm"):
        if not os.path.exists(path):
            raise CLIError(f"artifact {path!r} not found")
        artifact = read_artifact(path)
        artifact.check_consistency()
        graph, params = artifact.graph(), artifact.params
    else:
        shapes, dtype = parse_shapes(args.shape), parse_dtype(args.dtype)
        log = Progress()
        graph, params = load_model(path, shapes, dtype, args.params, log)
        shapes = {**(graph.attrs.get("shape_inputs") or {}), **shapes}
        log(f"optimising at opt level {args.opt_level}")
        graph, params = optimize(graph, shapes, dtype, params, args.opt_level)
    model = save_onnx(graph, out, params,
                      name=os.path.splitext(os.path.basename(path))[0])
    custom = sum(n.domain == CUSTOM_DOMAIN for f in [model.graph, *model.functions]
                 for n in f.node)
    print(f"wrote {out} ({len(model.graph.node)} nodes, {len(model.functions)} fused kernels "
          f"as functions, {custom} ops without an ONNX equivalent in domain {CUSTOM_DOMAIN})")
    return 0
