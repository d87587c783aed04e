"""ONNX ModelProto -> NNVM Graph + params, with shape arithmetic folded to constants.

Each ONNX value is a ``Value``: either a constant (NumPy array: initializers, Constant nodes,
anything computed only from constants or from known shapes) or an entry of the NNVM graph
under construction, with its shape and dtype inferred as soon as the node is made. Converters
build NNVM nodes through ``NodeContext.op``; an op whose inputs are all constants is evaluated
right away with its reference kernel instead of being added, so Shape -> Gather -> Concat ->
Reshape chains collapse to constants (a fixed point reached in one topological sweep, since
every folded value is final). Given concrete input shapes, a dynamic-shape export thus becomes
a static graph; without them, inputs keep unknown shapes and an op that needs one says which
input and which dimension.
"""

from __future__ import annotations

import itertools
import logging
import re
from typing import Any, Mapping, Sequence

import numpy as np
from nnvm.errors import NNVMError, OpNotFoundError
from nnvm.ir import Graph, Node, NodeEntry, make_node
from nnvm.op import get_op
from nnvm.runtime.structured_outputs import persistable, regroup  # noqa: F401 - regroup re-exported here

from .errors import (NeedsConstantError, OnnxImportError, OnnxUnsupportedError, format_error,
                     onnx_where)
from .registry import DEFAULT_DOMAINS, find_converter
from .tensors import attribute_value, np_dtype, onnx_dtype_name, tensor_to_array

logger = logging.getLogger("nnvm.onnx")
_REQUIRED = object()
#: Ops that are never evaluated at import time even when their inputs are constants.
_NO_FOLD = {"random_uniform", "random_normal", "random_uniform_like", "random_normal_like",
            "bernoulli", "multinomial"}


class Value:
    """One ONNX value: a constant array, or an NNVM entry with its known shape and dtype.

    Attributes:
        name: the ONNX value name (used to name params).
        const: the array when known at import time, else None.
        entry: the NNVM entry once the value lives in the graph.
        shape: tuple when known (``()`` = scalar), else None.
        dtype: NNVM dtype name when known.
        rank: number of dims when known (even if some dims are symbolic).
        symbolic: for graph inputs, ``(input, axis, dim_name)`` of each symbolic dim.
        default: for an overridable initializer (a graph input with a default), its
            initializer value; the value itself is an entry, since a caller may feed another.
    """

    __slots__ = ("name", "const", "entry", "shape", "dtype", "rank", "symbolic", "default")

    def __init__(self, name: str, const=None, entry=None, shape=None, dtype=None, rank=None,
                 symbolic=(), default=None):
        self.name = name
        self.default = default
        self.const = const
        self.entry = entry
        if const is not None:
            shape, dtype = tuple(const.shape), const.dtype.name
            dtype = "string" if dtype == "object" else dtype
        self.shape = None if shape is None else tuple(int(d) for d in shape)
        self.dtype = dtype
        self.rank = len(self.shape) if self.shape is not None else rank
        self.symbolic = tuple(symbolic)

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def __repr__(self) -> str:
        kind = "const" if self.is_const else "entry"
        return f"<Value {self.name} {kind} {self.shape} {self.dtype}>"


class SeqValue:
    """An ONNX sequence, unrolled at import time: a Python list of tensor Values.

    NNVM graphs carry tensors only. Sequences in ONNX models are short lists built, indexed
    and concatenated by ops whose positions are known once the input structure is (the
    backend adapter specialises each model to its concrete inputs), so the importer resolves
    every sequence op to the tensors it names and the compiled graph stays all-tensor, as
    fast as if the model had been written without sequences. Graph inputs of sequence type
    become one variable per element (``name.0``, ``name.1``...); sequence outputs are
    flattened and regrouped by the caller (graph attr ``onnx_output_structure``).
    """

    const = entry = shape = rank = None
    symbolic = ()
    is_const = False

    def __init__(self, name: str, items: Sequence["Value"] = (), elem_dtype: str | None = None):
        self.name = name
        self.items = list(items)
        self.elem_dtype = elem_dtype or next((v.dtype for v in self.items if v.dtype), None)

    @property
    def dtype(self):
        return self.elem_dtype

    def __repr__(self) -> str:
        return f"<SeqValue {self.name} len={len(self.items)} {self.elem_dtype}>"


class OptValue:
    """An ONNX optional: ``item`` is a Value / SeqValue, or None when the optional is empty.

    Whether it holds a value is known at import time (like a sequence's length), so
    OptionalHasElement folds to a constant and OptionalGetElement to its item.
    """

    const = entry = shape = rank = dtype = None
    symbolic = ()
    is_const = False

    def __init__(self, name: str, item=None):
        self.name = name
        self.item = item

    def __repr__(self) -> str:
        return f"<OptValue {self.name} {self.item!r}>"


class MapSeqValue:
    """An ONNX sequence of maps from ZipMap: one ``{label: score}`` map per row.

    NNVM carries it as the (N, C) score tensor ``tensor`` whose columns are ``keys`` in
    order (what the graph computes and ``lib.run`` returns); where it leaves the graph,
    ``regroup`` turns each row into a dict as onnxruntime returns it.
    """

    const = entry = shape = rank = dtype = None
    symbolic = ()
    is_const = False

    def __init__(self, name: str, tensor: "Value", keys: Sequence):
        self.name = name
        self.tensor = tensor
        self.keys = list(keys)

    def __repr__(self) -> str:
        return f"<MapSeqValue {self.name} {self.tensor!r} keys={self.keys}>"


#: Values that are not tensors (no NNVM entry of their own).
STRUCTURED = (SeqValue, OptValue, MapSeqValue)


class Scope:
    """Name -> Value for one ONNX graph, chained to the enclosing graph's scope."""

    def __init__(self, parent: "Scope | None" = None):
        self.parent = parent
        self.values: dict[str, Value] = {}
        self.captured: dict[str, Value] = {}

    def lookup(self, name: str) -> Value | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            if type(scope.parent) is not Scope and scope.parent is not None:
                return scope.parent.lookup(name)
            scope = scope.parent
        return None


class GraphBuilder:
    """Owns the NNVM nodes, params and names of one graph (the main graph or a subgraph)."""

    def __init__(self, importer: "OnnxImporter", prefix: str = ""):
        self.importer = importer
        self.prefix = prefix
        self.params: dict[str, np.ndarray] = {}
        self._const_vars: dict[int, NodeEntry] = {}
        self._keep: list[Value] = []
        self.names: set[str] = set()

    def unique(self, hint: str) -> str:
        base = _sanitize(self.prefix + hint) or "node"
        name, k = base, 1
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        self.names.add(name)
        return name

    def variable(self, name: str, shape, dtype) -> NodeEntry:
        attrs: dict[str, Any] = {}
        if shape is not None:
            attrs["shape"] = tuple(shape)
        if dtype is not None:
            attrs["dtype"] = dtype
        return NodeEntry(Node(None, name, attrs), 0, 0)

    def materialize(self, value: Value) -> NodeEntry:
        """The entry of ``value``, turning a constant into a param variable on first use."""
        if value.const is None and value.entry is not None:
            return value.entry
        if value.const is None:
            raise OnnxImportError(f"value '{value.name}' has neither a constant nor an entry")
        key = id(value)
        if key not in self._const_vars:
            name = self.unique(value.name or "const")
            self.params[name] = value.const
            self._const_vars[key] = self.variable(name, value.const.shape, value.dtype)
            self._keep.append(value)  # ids stay unique while the value is cached
        return self._const_vars[key]


class NodeContext:
    """What a converter sees: the ONNX node, its input Values, attributes and node builders."""

    def __init__(self, importer: "OnnxImporter", builder: GraphBuilder, scope: Scope, node,
                 inputs: list[Value | None], opset: int):
        self.importer = importer
        self.builder = builder
        self.scope = scope
        self.node = node
        self.inputs = inputs
        self.opset = opset
        self.where = onnx_where(node)
        self._attrs = {a.name: a for a in node.attribute}
        self._counter = itertools.count()
        self.base_name = node.name or (node.output[0] if node.output else node.op_type)

    # -- attributes and inputs -------------------------------------------------------------
    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        a = self._attrs.get(name)
        if a is None:
            if default is _REQUIRED:
                raise OnnxImportError(format_error(self.where, f"required attribute '{name}' "
                                                   "is missing", fix="Fix the exporter output"))
            return default
        return attribute_value(a, self.where)

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.node.output)

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def input(self, i: int) -> Value:
        if not self.has_input(i):
            raise OnnxImportError(format_error(self.where, f"input {i} is required but missing",
                                               fix="Fix the exporter output"))
        return self.inputs[i]

    def const(self, i: int, default: Any = _REQUIRED) -> np.ndarray | None:
        """Input ``i`` as an array; it must be known at import time."""
        if not self.has_input(i):
            if default is _REQUIRED:
                raise OnnxImportError(format_error(self.where, f"input {i} is required but "
                                                   "missing"))
            return default
        v = self.inputs[i]
        if v.const is None and v.default is not None:
            return self.importer.freeze_default(self, v)
        if v.const is None:
            raise self.importer.needs_constant(self, v, f"input {i} ('{self.node.input[i]}')")
        return v.const

    def is_const(self, i: int) -> bool:
        return self.has_input(i) and self.inputs[i].const is not None

    def shape(self, i: int | Value) -> tuple[int, ...]:
        v = self.input(i) if isinstance(i, int) else i
        if v.shape is None:
            raise self.importer.needs_constant(self, v, f"the shape of '{v.name}'", shape=True)
        return v.shape

    def data_dependent(self, i: int | Value) -> bool:
        """Whether input ``i`` is computed downstream of a data-dependent op (NonZero, NMS...):
        its value and shape exist only at run time, so a converter that would fold it (a
        shape, a K, a reshape target) builds a run-time op (``nnvm.ops.dynamic_shape``)."""
        v = self.input(i) if isinstance(i, int) else i
        if v.const is not None or v.entry is None:
            return False
        if v.entry.node.is_variable:
            return self.importer.run_time_input(self, v)
        return bool(v.entry.node.info.get(DATA_DEPENDENT))

    def rank(self, i: int | Value) -> int:
        v = self.input(i) if isinstance(i, int) else i
        if v.rank is None:
            raise self.importer.needs_constant(self, v, f"the rank of '{v.name}'", shape=True)
        return v.rank

    def dtype(self, i: int | Value) -> str:
        v = self.input(i) if isinstance(i, int) else i
        if v.dtype is None:
            raise OnnxImportError(format_error(self.where, f"the dtype of '{v.name}' is unknown",
                                               fix="Give dtype= to from_onnx"))
        return v.dtype

    # -- building ----------------------------------------------------------------------------
    def constant(self, array: Any, dtype: str | None = None, name: str | None = None) -> Value:
        arr = np.asarray(array)
        if dtype is not None:
            arr = arr.astype(np_dtype(dtype))
        return Value(name or f"{self.base_name}_const", const=np.asarray(arr, order="C"))

    def op(self, op_name: str, *inputs: Value, **attrs: Any) -> Value:
        """Apply NNVM op ``op_name``; returns its first output (see ``op_multi``)."""
        return self.op_multi(op_name, *inputs, **attrs)[0]

    def op_multi(self, op_name: str, *inputs: Value, subgraphs: Sequence[Graph] = (),
                 **attrs: Any) -> list[Value]:
        """Apply an NNVM op to Values; folds it when every input is a constant.

        ``subgraphs`` are attached to the node (control flow) before its rules run.
        """
        try:
            op = get_op(op_name)
        except OpNotFoundError:
            raise OnnxUnsupportedError(format_error(
                self.where, f"needs NNVM operator '{op_name}', which is not registered",
                fix="Install/upgrade the nnvm plugin that provides it")) from None
        if op.is_variadic and "num_args" not in attrs:
            attrs["num_args"] = len(inputs)
        for v in inputs:
            if isinstance(v, STRUCTURED):
                kind = {SeqValue: "a sequence", OptValue: "an optional"}.get(
                    type(v), "a sequence of maps (ZipMap)")
                raise OnnxImportError(format_error(
                    self.where, f"input '{v.name}' is {kind}, but NNVM op '{op_name}' takes "
                    "tensors", fix="Take the element out first (SequenceAt / "
                    "OptionalGetElement), as the ONNX type rules require"))
        entries = [self.builder.materialize(v) for v in inputs]
        name = self.builder.unique(f"{self.base_name}" if next(self._counter) == 0
                                   else f"{self.base_name}_{op_name}")
        try:
            node = make_node(op.name, entries, attrs, name)
        except NNVMError as exc:
            raise OnnxImportError(f"{self.where}: {exc}") from None
        node.subgraphs = list(subgraphs)
        dynamic = op.get_attr("TDynamicShape")
        if callable(dynamic):
            dynamic = dynamic(node.attrs)
        if dynamic and self.importer.static_shapes and \
                not all(v.const is not None for v in inputs):
            dyn = [v for v in inputs if v.const is None]
            raise self.importer.needs_constant(
                self, dyn, f"the inputs of '{op.name}' (its output shape depends on their "
                "values)")
        if dynamic or any(e.node.info.get(DATA_DEPENDENT) for e in entries):
            node.info[DATA_DEPENDENT] = True  # its shapes are known only at run time
        nout = node.num_outputs
        in_shapes = [v.shape for v in inputs]
        in_dtypes = [v.dtype for v in inputs]
        shapes = self._infer(node, "FInferShape", in_shapes, None, nout)
        from nnvm.passes.infer_type import same_type

        dtypes = self._infer(node, "FInferType", in_dtypes, same_type, nout)
        if inputs and all(v.const is not None for v in inputs) and op.name not in _NO_FOLD:
            return self._fold(node, inputs, dtypes)
        if not inputs and op.name not in _NO_FOLD and all(s is not None for s in shapes):
            return self._fold(node, inputs, dtypes)
        return [Value(f"{name}:{k}", entry=NodeEntry(node, k, 0), shape=shapes[k],
                      dtype=dtypes[k]) for k in range(nout)]

    def _infer(self, node: Node, key: str, ins, default, nout):
        rule = node.op.get_attr(key) or default
        if rule is None:
            return [None] * nout
        try:
            _, outs = rule(node.attrs, list(ins), [None] * nout)
        except NNVMError as exc:
            raise OnnxImportError(format_error(self.where, f"{node.op.name}: {exc}",
                                               fix="Check the input shapes given to "
                                                   "from_onnx")) from None
        except Exception as exc:  # noqa: BLE001 - rules see partial information
            if any(s is None for s in ins):
                return [None] * nout
            raise OnnxImportError(format_error(self.where, f"{node.op.name}: {key} failed: "
                                               f"{exc!r}", fix=f"inputs {list(ins)}")) from None
        return [None if o is None else (tuple(o) if key == "FInferShape" else o)
                for o in list(outs)[:nout]] + [None] * max(0, nout - len(outs))

    def _fold(self, node: Node, inputs: Sequence[Value], dtypes) -> list[Value]:
        kernel = node.op.get_attr("FReferenceNode")
        args = [v.const for v in inputs]
        try:
            if kernel is not None:
                res = kernel(node, *args)
            else:
                ref = node.op.get_attr("FReference")
                if ref is None:
                    raise OnnxUnsupportedError(format_error(
                        self.where, f"NNVM op '{node.op.name}' has no reference kernel to fold "
                        "constants with"))
                res = ref(node.attrs, *args)
        except NNVMError as exc:
            raise OnnxImportError(f"{self.where}: folding {node.op.name}: {exc}") from None
        except Exception as exc:  # noqa: BLE001
            raise OnnxImportError(format_error(
                self.where, f"evaluating {node.op.name} on constant inputs failed: {exc!r}",
                fix=f"input shapes {[a.shape for a in args]}")) from None
        if not isinstance(res, (tuple, list)):
            res = (res,)
        out = []
        for k, r in enumerate(res):
            r = np.asarray(r)
            if k < len(dtypes) and dtypes[k] is not None and r.dtype.name != dtypes[k]:
                r = r.astype(np_dtype(dtypes[k]))
            out.append(Value(f"{node.name}_{k}" if k else node.name,
                             const=np.asarray(r, order="C")))
        return out

    def subgraph(self, graph_proto, input_specs: Sequence[tuple] | None = None):
        """Convert a subgraph attribute; see ``OnnxImporter.convert_subgraph``."""
        return self.importer.convert_subgraph(self, graph_proto, input_specs)


class OnnxImporter:
    """Converts one ModelProto; ``import_model`` is the entry point."""

    def __init__(self, model, shape: Mapping | None = None, dtype: Any = None,
                 freeze: Mapping | None = None, static_shapes: bool = False):
        self.model = model
        self.static_shapes = static_shapes
        self._run_time_inputs: set[str] = set()
        self._onnx_ranks: dict[str, int] | None = None
        # Tensor inputs: a shape tuple. Sequence inputs: a list of element shapes. Optional
        # inputs: None when empty. Interpreted per the input's declared type.
        self.shape = dict(shape or {})
        self.dtype = dtype
        self.freeze = {k: v if v is None or isinstance(v, list) else np.asarray(v)
                       for k, v in (freeze or {}).items()}
        self.opsets: dict[str, int] = {}
        for imp in model.opset_import:
            self.opsets["" if imp.domain in DEFAULT_DOMAINS else imp.domain] = int(imp.version)
        if "" not in self.opsets:
            self.opsets[""] = 1
        self.functions = {(f.domain, f.name): f for f in model.functions}

    def run_time_input(self, ctx: NodeContext, value: Value) -> bool:
        """Whether a graph input that a converter would fold (a shape, a split) is read at run
        time instead: yes unless ``static_shapes`` (the onnx.backend adapter wants the
        NeedsConstantError that names it) or it has an initializer default (frozen as before).
        Warns once per input, since freezing it compiles the op instead of running it on the host."""
        if self.static_shapes or value.default is not None:
            return False
        if value.name not in self._run_time_inputs:
            self._run_time_inputs.add(value.name)
            logger.warning("%s: graph input '%s' decides a shape, so it is read at run time (the "
                           "op runs on the host after the compiled part); if it is constant in "
                           "your use, freeze it to compile it: --freeze %s=VALUE on the CLI, "
                           "from_onnx(..., freeze={'%s': array}) in Python", ctx.where,
                           value.name, value.name, value.name)
        return True

    # -- errors ------------------------------------------------------------------------------
    def needs_constant(self, ctx: NodeContext, value: Value, what: str,
                       shape: bool = False) -> NeedsConstantError:
        deps, symbolic = self._dependencies(value, shape)
        if symbolic:
            dims = ", ".join(f"input '{i}' dim {a}" + (f" ('{n}')" if n else "")
                             for i, a, n in symbolic)
            return NeedsConstantError(format_error(
                ctx.where, f"needs {what} at import time, but it depends on symbolic {dims}",
                fix="Pass concrete input shapes: from_onnx(model, shape={" +
                    ", ".join(f"'{i}': (...)" for i in dict.fromkeys(s[0] for s in symbolic))
                    + "})"), deps, symbolic)
        origin = _data_dependent_origin(value) if shape else None
        if origin is not None:
            return NeedsConstantError(format_error(
                ctx.where, f"needs {what} at import time, but that shape depends on the data: "
                f"it follows from '{origin.name}' ({origin.op.name}), whose output shape is "
                "known only at run time",
                fix="Freeze the inputs that decide that shape (from_onnx(..., freeze="
                    "{name: array})) if they are constant in your use; this op is not "
                    "imported after a data-dependent one yet (ops that need only the rank "
                    "are)"), deps, symbolic)
        names = ", ".join(f"'{d}'" for d in deps) or "(unknown)"
        return NeedsConstantError(format_error(
            ctx.where, f"needs {what} at import time, but it is computed from graph input(s) "
            f"{names}", fix="Make it an initializer, or pass its value with "
            "from_onnx(..., freeze={name: array})"), deps, symbolic)

    def _dependencies(self, value, shape: bool):
        """Graph inputs whose values (and symbolic dims) ``value`` (or a list) depends on."""
        values = value if isinstance(value, list) else [value]
        inputs, symbolic = [], []
        seen = set()
        stack = [v.entry.node for v in values if v.entry is not None]
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n.op is None:
                if n.name in self.input_values:
                    inputs.append(n.name)
                    symbolic.extend(self.input_values[n.name].symbolic)
                continue
            stack.extend(e.node for e in n.inputs)
        if shape and not symbolic:
            for name in inputs:
                symbolic.extend(self.input_values[name].symbolic)
        return sorted(set(inputs)), symbolic

    # -- the main graph -----------------------------------------------------------------------
    def run(self) -> tuple[Graph, dict[str, np.ndarray]]:
        graph = self.model.graph
        self.report_unsupported(graph)
        builder = GraphBuilder(self)
        scope = Scope()
        self.input_values: dict[str, Value] = {}
        init_names = set()
        for t in graph.initializer:
            where = f"ONNX initializer '{t.name}'"
            arr = tensor_to_array(t, where, None)
            scope.values[t.name] = Value(t.name, const=arr)
            init_names.add(t.name)
        for t in graph.sparse_initializer:
            where = f"ONNX sparse initializer '{t.values.name}'"
            raise OnnxUnsupportedError(format_error(where, "sparse initializers are not "
                                                    "supported", fix="Densify the tensor"))
        given = set(self.shape) | set(self.freeze)
        real_inputs = [i for i in graph.input if i.name not in init_names]
        known = {i.name for i in real_inputs} | init_names
        for name in given:
            if name not in known:
                raise OnnxImportError(format_error(
                    f"from_onnx: shape/freeze for '{name}'", "names no graph input",
                    fix=f"Graph inputs: {', '.join(i.name for i in real_inputs)}"))
        for inp in real_inputs:
            value = self._input_value(builder, inp)
            scope.values[inp.name] = value
            self.input_values[inp.name] = value
        self.frozen_defaults: set[str] = set()
        overridable = self._overridable_initializers(builder, scope, init_names)
        self.convert_nodes(builder, scope, graph.node)
        outputs, structure = [], []
        for out in graph.output:
            v = scope.lookup(out.name)
            if v is None:
                raise OnnxImportError(format_error(f"ONNX graph output '{out.name}'",
                                                   "is produced by no node",
                                                   fix="Fix the exporter output"))
            structure.append(_flatten(builder, v, outputs))
        if not outputs:
            raise OnnxImportError(format_error("ONNX graph", "has no tensor outputs",
                                               fix="Every output is an empty sequence or "
                                                   "optional; nothing to compute"))
        g = Graph(outputs)
        used = set(g.index.input_names)
        params = {k: v for k, v in builder.params.items() if k in used}
        shapes = {n: v.shape for n, v in self.input_values.items()
                  if v.shape is not None and v.entry is not None and n in used}
        dtypes = {n: v.dtype for n, v in self.input_values.items()
                  if v.dtype is not None and v.entry is not None and n in used}
        g = g.with_attrs(shape_inputs=shapes, dtype_inputs=dtypes,
                         onnx_output_names=[o.name for o in graph.output],
                         onnx_opset=self.opsets.get("", 1))
        defaults = [n for n in overridable if n in used and n not in self.frozen_defaults]
        if defaults:  # graph inputs whose value, when not fed, is the param of that name
            g = g.with_attrs(input_defaults=defaults)
        if any(st != "tensor" for st in structure):  # JSON text: survives graph JSON / export
            g = persistable(g.with_attrs(onnx_output_structure=structure))
        # the module reports the model's own names (a sequence's tensors as name.0, name.1...)
        names = [n for o, st in zip(graph.output, structure) for n in _flat_names(o.name, st)]
        return g.with_attrs(output_names=names), params

    def _overridable_initializers(self, builder: GraphBuilder, scope: Scope,
                                  init_names: set) -> list[str]:
        """Initializers also listed as graph inputs: overridable defaults from IR version 4
        on (onnxruntime's rule; before it every initializer had to be listed and all are
        constants). Each becomes a graph input (an entry, so nothing computed from it is
        folded) with its initializer as the param of the same name, the default when not
        fed; ``freeze={name: value}`` binds it to a constant instead."""
        self._default_names: dict[int, str] = {}
        if self.model.ir_version < 4:
            return []
        names = []
        for inp in self.model.graph.input:
            if inp.name not in init_names:
                continue
            arr = scope.values[inp.name].const
            where = f"ONNX graph input '{inp.name}' (an initializer)"
            if inp.name in self.freeze:
                frozen = np.asarray(self.freeze[inp.name]).astype(arr.dtype)
                self._check_shape(where, list(arr.shape), frozen.shape)
                scope.values[inp.name] = Value(inp.name, const=np.asarray(frozen, order="C"))
                continue
            if inp.name in self.shape:
                self._check_shape(where, list(arr.shape), tuple(self.shape[inp.name]))
            dtype = "string" if arr.dtype == object else arr.dtype.name
            value = Value(inp.name, entry=builder.variable(inp.name, arr.shape, dtype),
                          shape=arr.shape, dtype=dtype, default=arr)
            builder.names.add(inp.name)
            builder.params[inp.name] = arr
            self._default_names[id(arr)] = inp.name
            scope.values[inp.name] = value
            self.input_values[inp.name] = value
            names.append(inp.name)
        return names

    def freeze_default(self, ctx: NodeContext, value: Value) -> np.ndarray:
        """A converter needs the value of an overridable initializer at import (a Reshape
        shape, a Pad amount...): it stays the param of its name, bound like a weight, and is
        no longer an input (feeding another value could not change what was folded)."""
        name = self._default_names.get(id(value.default), value.name)
        if name not in self.frozen_defaults:
            self.frozen_defaults.add(name)
            logger.warning("%s: needs the value of initializer '%s' at import time; it is "
                           "frozen to its initializer (not overridable)", ctx.where, name)
        return value.default

    def _input_value(self, builder: GraphBuilder, inp) -> Value:
        where = f"ONNX graph input '{inp.name}'"
        if inp.type.WhichOneof("value") in ("sequence_type", "optional_type"):
            if inp.name in self.freeze:
                return self._structured_input(builder, inp.name, inp.type, None,
                                              self.freeze[inp.name], True, where)
            if inp.name not in self.shape:
                raise NeedsConstantError(format_error(
                    where, f"is a {inp.type.WhichOneof('value').split('_')[0]}; its structure "
                    "must be known at import time",
                    fix=f"Pass shape={{'{inp.name}': [shape of each element]}} (None for an "
                        "empty optional)"), [inp.name], [])
            return self._structured_input(builder, inp.name, inp.type, self.shape[inp.name],
                                          None, False, where)
        tt = inp.type.tensor_type if inp.type.HasField("tensor_type") else None
        if tt is None:
            raise OnnxUnsupportedError(format_error(where, "only tensor, sequence and optional "
                                                    "inputs are supported",
                                                    got=inp.type.WhichOneof("value")))
        dtype = onnx_dtype_name(tt.elem_type, where) if tt.elem_type else None
        user_dtype = self.dtype.get(inp.name) if isinstance(self.dtype, Mapping) else \
            self.dtype
        if user_dtype is not None:
            user_dtype = np.dtype(user_dtype).name if not isinstance(user_dtype, str) \
                else user_dtype
            user_dtype = "string" if user_dtype == "object" else user_dtype
            if dtype is not None and user_dtype != dtype:
                raise OnnxImportError(format_error(where, "dtype contradicts the model",
                                                   dtype, user_dtype))
            dtype = user_dtype
        dims, symbolic = None, []
        if tt.HasField("shape"):
            dims = []
            for axis, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value >= 0:
                    dims.append(int(d.dim_value))
                else:
                    dims.append(None)
                    symbolic.append((inp.name, axis, d.dim_param or None))
        if inp.name in self.freeze:
            arr = self.freeze[inp.name]
            if dtype is not None:
                arr = arr.astype(np_dtype(dtype))
            self._check_shape(where, dims, arr.shape)
            return Value(inp.name, const=np.asarray(arr, order="C"))
        shape = None
        if inp.name in self.shape:
            shape = tuple(int(d) for d in self.shape[inp.name])
            self._check_shape(where, dims, shape)
            symbolic = []
        elif dims is not None and not symbolic:
            shape = tuple(dims)
        rank = len(dims) if dims is not None else (len(shape) if shape is not None else None)
        entry = builder.variable(inp.name, shape, dtype)
        builder.names.add(inp.name)
        return Value(inp.name, entry=entry, shape=shape, dtype=dtype, rank=rank,
                     symbolic=symbolic)

    def _structured_input(self, builder, name, type_proto, spec, frozen, is_frozen, where):
        """A sequence / optional graph input from its element shapes (or frozen values)."""
        kind = type_proto.WhichOneof("value")
        if kind == "optional_type":
            if (frozen if is_frozen else spec) is None:
                return OptValue(name, None)
            return OptValue(name, self._structured_input(
                builder, name, type_proto.optional_type.elem_type, spec, frozen, is_frozen,
                where))
        if kind == "sequence_type":
            elem = type_proto.sequence_type.elem_type
            if elem.WhichOneof("value") != "tensor_type":
                raise OnnxUnsupportedError(format_error(where, "only sequences of tensors are "
                                                        "supported"))
            dtype = onnx_dtype_name(elem.tensor_type.elem_type, where) \
                if elem.tensor_type.elem_type else None
            values = frozen if is_frozen else spec
            if not isinstance(values, (list, tuple)):
                raise OnnxImportError(format_error(where, "a sequence input needs a list",
                                                   "list of element shapes or arrays",
                                                   type(values).__name__))
            items = []
            for k, item in enumerate(values):
                var = f"{name}.{k}"
                if is_frozen:
                    arr = np.asarray(item)
                    items.append(Value(var, const=arr.astype(np_dtype(dtype)) if dtype else arr))
                    continue
                shape = tuple(int(d) for d in item)
                value = Value(var, entry=builder.variable(var, shape, dtype), shape=shape,
                              dtype=dtype)
                builder.names.add(var)
                self.input_values[var] = value
                items.append(value)
            return SeqValue(name, items, dtype)
        if kind == "tensor_type":
            dtype = onnx_dtype_name(type_proto.tensor_type.elem_type, where)
            if is_frozen:
                return Value(name, const=np.asarray(frozen).astype(np_dtype(dtype)))
            shape = tuple(int(d) for d in spec)
            value = Value(name, entry=builder.variable(name, shape, dtype), shape=shape,
                          dtype=dtype)
            builder.names.add(name)
            self.input_values[name] = value
            return value
        raise OnnxUnsupportedError(format_error(where, f"inputs of type {kind} are not "
                                                "supported"))

    @staticmethod
    def _check_shape(where: str, dims, shape) -> None:
        if dims is None:
            return
        if len(dims) != len(shape) or any(d is not None and d != s for d, s in zip(dims, shape)):
            raise OnnxImportError(format_error(
                where, "the given shape contradicts the model's declared shape",
                tuple("?" if d is None else d for d in dims), tuple(shape),
                fix="Give a shape that matches the fixed dims of the model input"))

    # -- nodes -------------------------------------------------------------------------------
    def report_unsupported(self, graph) -> None:
        """Raise once, listing every op of the model (subgraphs included) with no converter."""
        missing: dict[str, list[str]] = {}
        for node, opsets in self._walk(graph, self.opsets):
            reason = self._unsupported_reason(node, opsets)
            if reason is not None:
                missing.setdefault(reason, []).append(node.name or
                                                      (node.output[0] if node.output else "?"))
        if missing:
            parts = [f"{r} (nodes: {', '.join(repr(n) for n in names[:8])}"
                     f"{', ...' if len(names) > 8 else ''})" for r, names in missing.items()]
            raise OnnxUnsupportedError(format_error(
                "ONNX model", f"{len(missing)} unsupported operator(s): " + "; ".join(parts),
                fix="Rewrite these ops or add converters (nnvm_onnx.registry.converter)"))

    def _walk(self, graph, opsets):
        for node in graph.node:
            yield node, opsets
            for a in node.attribute:
                if a.type == a.GRAPH:
                    yield from self._walk(a.g, opsets)
                elif a.type == a.GRAPHS:
                    for g in a.graphs:
                        yield from self._walk(g, opsets)

    def _unsupported_reason(self, node, opsets) -> str | None:
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        if (node.domain, node.op_type) in self.functions:
            return None
        if domain not in opsets:
            return f"{node.op_type} in unknown domain '{node.domain}'"
        conv = find_converter(domain, node.op_type, opsets[domain])
        if conv is None:
            if domain == "" and _schema_function(node, opsets[domain]) is not None:
                return None
            label = node.op_type if domain == "" else f"{domain}.{node.op_type}"
            return f"{label} (opset {opsets[domain]})"
        for name in conv.requires:
            try:
                get_op(name)
            except OpNotFoundError:
                return f"{node.op_type} (needs NNVM op '{name}')"
        return None

    def convert_nodes(self, builder: GraphBuilder, scope: Scope, nodes,
                      opsets: Mapping[str, int] | None = None) -> None:
        opsets = opsets or self.opsets
        for node in nodes:
            self.convert_node(builder, scope, node, opsets)

    def convert_node(self, builder: GraphBuilder, scope: Scope, node, opsets) -> None:
        where = onnx_where(node)
        inputs: list[Value | None] = []
        for name in node.input:
            if name == "":
                inputs.append(None)
                continue
            v = scope.lookup(name)
            if v is None:
                raise OnnxImportError(format_error(
                    where, f"input '{name}' is not produced by any earlier node, initializer "
                    "or graph input", fix="The model is missing an initializer or is not "
                    "topologically sorted"))
            inputs.append(v)
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        local = self.functions.get((node.domain, node.op_type))
        if local is not None:
            self._inline_function(builder, scope, node, local, inputs, opsets)
            return
        if domain not in opsets:
            raise OnnxUnsupportedError(format_error(where, f"unknown op domain '{node.domain}'",
                                                    fix="Only ai.onnx ops and local functions "
                                                        "are supported"))
        opset = opsets[domain]
        conv = find_converter(domain, node.op_type, opset)
        if conv is None:
            fn = _schema_function(node, opset, inputs) if domain == "" else None
            if fn is None:
                raise OnnxUnsupportedError(format_error(where, f"no converter for "
                                                        f"{node.op_type} at opset {opset}"))
            self._inline_function(builder, scope, node, fn, inputs, opsets)
            return
        ctx = NodeContext(self, builder, scope, node, inputs, opset)
        try:
            outs = conv.fn(ctx, node)
        except NNVMError:
            raise
        except Exception as exc:  # noqa: BLE001 - a converter met input it did not expect
            raise OnnxImportError(format_error(where, f"conversion failed: {exc!r}",
                                               fix="The node's inputs or attributes are "
                                                   "malformed")) from None
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for k, name in enumerate(node.output):
            if name == "":
                continue
            if k >= len(outs) or outs[k] is None:
                raise OnnxUnsupportedError(format_error(where, f"output {k} ('{name}') is not "
                                                        "supported by the converter"))
            v = outs[k]
            if isinstance(v, STRUCTURED):
                scope.values[name] = v
                continue
            if v.const is not None:
                v = Value(name, const=v.const)
            else:
                rank = self.onnx_rank(name) if v.shape is None and v.rank is None and \
                    v.entry.node.info.get(DATA_DEPENDENT) else v.rank
                v = Value(name, entry=v.entry, shape=v.shape, dtype=v.dtype, rank=rank,
                          default=v.default)
            scope.values[name] = v

    def onnx_rank(self, name: str) -> int | None:
        """The rank ONNX's own shape inference gives value ``name``, or None.

        Why: downstream of a data-dependent op (NonZero, NMS...) NNVM knows no shape until
        run time, yet most converters only need the rank (Transpose, Concat, TopK, Softmax
        axes), which ONNX infers statically (NonZero of a 2-D tensor is 2-D). Computed once,
        on the first such value, so models without data-dependent ops never pay for it."""
        if self._onnx_ranks is None:
            self._onnx_ranks = _inferred_ranks(self.model)
        return self._onnx_ranks.get(name)

    def _inline_function(self, builder, scope, node, fn, inputs, opsets) -> None:
        """Expand a function (local, or an op's schema body) in place of ``node``."""
        where = onnx_where(node)
        prefix = f"{node.name or node.output[0]}__"
        inner = Scope(scope)
        for formal, v in zip(fn.input, inputs):
            if v is not None:
                inner.values[formal] = v
        actual = {a.name: a for a in node.attribute}
        defaults = {a.name: a for a in getattr(fn, "attribute_proto", [])}
        fn_opsets = dict(opsets)
        for imp in fn.opset_import:
            fn_opsets["" if imp.domain in DEFAULT_DOMAINS else imp.domain] = int(imp.version)
        import onnx

        renamed = []
        for inner_node in fn.node:
            n = onnx.NodeProto()
            n.CopyFrom(inner_node)
            n.name = prefix + (inner_node.name or inner_node.op_type)
            del n.attribute[:]
            for a in inner_node.attribute:
                if a.ref_attr_name:
                    src = actual.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                    if src is None:
                        continue
                    b = onnx.AttributeProto()
                    b.CopyFrom(src)
                    b.name = a.name
                    n.attribute.append(b)
                else:
                    n.attribute.append(a)
            renamed.append(n)
        try:
            self.convert_nodes(builder, inner, renamed, fn_opsets)
        except NeedsConstantError as exc:
            raise NeedsConstantError(f"{where}: in its function body: {exc}", exc.inputs,
                                     exc.symbolic) from None
        except NNVMError as exc:
            raise type(exc)(f"{where}: in its function body: {exc}") from None
        for formal, name in zip(fn.output, node.output):
            if name == "":
                continue
            v = inner.values.get(formal) or inner.lookup(formal)
            if v is None:
                raise OnnxImportError(format_error(where, f"function output '{formal}' is not "
                                                   "computed by its body"))
            scope.values[name] = v

    # -- subgraphs (If / Loop / Scan bodies) ---------------------------------------------------
    def convert_subgraph(self, ctx: NodeContext, graph_proto, input_specs=None):
        """Convert a subgraph into its own NNVM Graph.

        Formal inputs become variables (shape/dtype from ``input_specs`` or the proto); names
        from enclosing scopes that are not constants become *captured* inputs: variables of
        the subgraph that the control-flow node feeds from extra inputs.

        Returns:
            ``(graph, params, formal_names, captured: list[(var_name, outer Value)],
            out_values)``
        """
        builder = GraphBuilder(self, prefix="")
        scope = Scope(_CaptureScope(self, builder, ctx.scope))
        formal = []
        for k, inp in enumerate(graph_proto.input):
            spec = input_specs[k] if input_specs is not None and k < len(input_specs) else None
            shape, dtype = spec if spec is not None else (None, None)
            if dtype is None and inp.type.HasField("tensor_type") and \
                    inp.type.tensor_type.elem_type:
                dtype = onnx_dtype_name(inp.type.tensor_type.elem_type, ctx.where)
            if shape is None and inp.type.HasField("tensor_type") and \
                    inp.type.tensor_type.HasField("shape"):
                dims = [d.dim_value if d.HasField("dim_value") else None
                        for d in inp.type.tensor_type.shape.dim]
                shape = tuple(dims) if all(d is not None for d in dims) else None
            name = builder.unique(inp.name)
            formal.append(name)
            scope.values[inp.name] = Value(inp.name, entry=builder.variable(name, shape, dtype),
                                           shape=shape, dtype=dtype)
        for t in graph_proto.initializer:
            scope.values[t.name] = Value(t.name, const=tensor_to_array(t, ctx.where))
        self.convert_nodes(builder, scope, graph_proto.node)
        outs = []
        for o in graph_proto.output:
            v = scope.lookup(o.name)
            if v is None:
                raise OnnxImportError(format_error(ctx.where, f"subgraph output '{o.name}' is "
                                                   "produced by no node"))
            outs.append(v)
        entries = [builder.materialize(v) for v in outs]
        g = Graph(entries)
        captured = scope.parent.captured_list
        used = set(g.index.input_names)
        params = {k: v for k, v in builder.params.items() if k in used}
        return g, params, formal, captured, outs


class _CaptureScope(Scope):
    """The view a subgraph has of enclosing scopes: constants pass through; other values are
    captured as new variables of the subgraph (fed by the control-flow node)."""

    def __init__(self, importer, builder: GraphBuilder, outer: Scope):
        super().__init__(None)
        self.builder = builder
        self.outer = outer
        self.captured_list: list[tuple[str, Value]] = []
        self._local: dict[str, Value] = {}

    def lookup(self, name: str) -> Value | None:
        if name in self._local:
            return self._local[name]
        v = self.outer.lookup(name)
        if v is None or v.const is not None or isinstance(v, STRUCTURED):
            return v
        var = self.builder.unique(name)
        local = Value(name, entry=self.builder.variable(var, v.shape, v.dtype), shape=v.shape,
                      dtype=v.dtype, rank=v.rank, default=getattr(v, "default", None))
        if v.entry is not None and v.entry.node.info.get(DATA_DEPENDENT):
            local.entry.node.info[DATA_DEPENDENT] = True  # its shape is known only at run time
        self.captured_list.append((var, v))
        self._local[name] = local
        return local


def _flatten(builder: GraphBuilder, value, entries: list):
    """Append the tensor entries of an output value; returns its structure record:
    ``"tensor"``, ``["sequence", n]``, ``["optional", None | structure]`` or
    ``["zipmap", keys]``."""
    if isinstance(value, MapSeqValue):
        entries.append(builder.materialize(value.tensor))
        return ["zipmap", value.keys]
    if isinstance(value, SeqValue):
        for item in value.items:
            entries.append(builder.materialize(item))
        return ["sequence", len(value.items)]
    if isinstance(value, OptValue):
        return ["optional", None if value.item is None else
                _flatten(builder, value.item, entries)]
    entries.append(builder.materialize(value))
    return "tensor"


def _flat_names(name: str, structure) -> list[str]:
    """Names of the tensors ``_flatten`` appended for the output ``name``."""
    if structure == "tensor" or structure[0] == "zipmap":
        return [name]
    if structure[0] == "sequence":
        return [f"{name}.{k}" for k in range(structure[1])]
    return [] if structure[1] is None else _flat_names(name, structure[1])


def _schema_function(node, opset: int, inputs=None):
    """The FunctionProto an ONNX op schema defines for ``node`` (None if it has none)."""
    import onnx

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:  # noqa: BLE001 - unknown op
        return None
    try:
        if schema.has_function:
            fn = schema.get_function_with_opset_version(opset) \
                if hasattr(schema, "get_function_with_opset_version") else None
            return fn if fn is not None and len(fn.node) else schema.function_body
        if schema.has_context_dependent_function:
            if inputs is None:
                return True
            types = []
            for v in inputs:
                tp = onnx.TypeProto()
                if v is not None and v.dtype is not None:
                    from .tensors import onnx_elem_type

                    tp.tensor_type.elem_type = onnx_elem_type(v.dtype)
                    if v.shape is not None:
                        for d in v.shape:
                            tp.tensor_type.shape.dim.add().dim_value = d
                types.append(tp.SerializeToString())
            raw = schema.get_context_dependent_function_with_opset_version(
                opset, node.SerializeToString(), types) if hasattr(
                schema, "get_context_dependent_function_with_opset_version") else \
                schema.get_context_dependent_function(node.SerializeToString(), types)
            fn = onnx.FunctionProto()
            fn.ParseFromString(raw)
            return fn if len(fn.node) else None
    except Exception:  # noqa: BLE001 - no body for this version/context
        return None
    return None


_BAD = re.compile(r"[^A-Za-z0-9_.:/\-]")


def _sanitize(name: str) -> str:
    return _BAD.sub("_", name)


#: ``Node.info`` flag of nodes downstream of a data-dependent op (set while importing)
DATA_DEPENDENT = "onnx_data_dependent"


def _data_dependent_origin(value) -> Node | None:
    """The nearest op upstream of ``value`` (or a list of values) whose output shape depends
    on data (``TDynamicShape``: NonZero, NonMaxSuppression...), or None."""
    from nnvm.compiler.dynamic_region import is_dynamic_op

    values = value if isinstance(value, list) else [value]
    queue = [v.entry.node for v in values if getattr(v, "entry", None) is not None and
             v.entry.node.info.get(DATA_DEPENDENT)]  # others need no walk
    seen: set[int] = set()
    while queue:
        node = queue.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if is_dynamic_op(node):
            return node
        queue.extend(e.node for e in node.inputs)
    return None


def _inferred_ranks(model) -> dict[str, int]:
    """``{value name: rank}`` from ``onnx.shape_inference`` over the graph and its subgraphs
    (a name whose rank differs between graphs is left out)."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is a hint here; without it ranks stay unknown
        return {}
    ranks: dict[str, int] = {}
    clashes: set[str] = set()
    stack = [inferred.graph]
    while stack:
        graph = stack.pop()
        for info in (*graph.value_info, *graph.output):
            tt = info.type.tensor_type if info.type.HasField("tensor_type") else None
            if tt is None or not tt.HasField("shape"):
                continue
            rank = len(tt.shape.dim)
            if ranks.setdefault(info.name, rank) != rank:
                clashes.add(info.name)
        for node in graph.node:
            for attr in node.attribute:
                stack.extend([attr.g] if attr.HasField("g") else list(attr.graphs))
    return {k: v for k, v in ranks.items() if k not in clashes}


def import_model(model: Any, shape: Mapping | None = None, dtype: Any = None,
                 freeze: Mapping | None = None, check: bool = True,
                 static_shapes: bool = False) -> tuple[Graph, dict[str, np.ndarray]]:
    """Import an ONNX model (path, bytes or ModelProto) as ``(graph, params)``.

    Args:
        model: the model.
        shape: ``{input: shape}`` for inputs with symbolic dims (or to specialise them).
        dtype: one dtype, or ``{input: dtype}``, for inputs whose type the model omits.
        freeze: ``{input: array}`` inputs to treat as constants (e.g. a shape tensor fed as
            an input); their values are folded into the graph.
        check: run ``onnx.checker`` first.
        static_shapes: True refuses ops whose output shape depends on input values
            (NonZero, Unique, NonMaxSuppression...) unless their inputs fold to constants,
            raising ``NeedsConstantError`` (the onnx.backend adapter asks for it, then
            freezes the inputs it names). Default False: such ops import with their outputs'
            shapes left to run time (``dynamic_shape``); ``reference`` runs them as they are
            and compiled targets compile the static part and run the data-dependent tail
            on the host (``nnvm.compiler.dynamic_region``).

    Raises:
        NNVMError: every failure, naming the file, input or node.
    """
    from .loader import load_model

    proto, _ = load_model(model, check=check)
    try:
        return OnnxImporter(proto, shape, dtype, freeze, bool(static_shapes)).run()
    except NNVMError:
        raise
    except RecursionError:
        raise OnnxImportError("ONNX model: nesting is too deep to import") from None
