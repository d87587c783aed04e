"""Symbolic API, as in the original NNVM: ``Variable``, ``Group`` and one function per op.

``nnvm.symbol.dense(x, units=16, name="fc1")`` creates node ``fc1`` and, for the inputs not
given, variables named ``fc1_weight`` and ``fc1_bias``. Op functions are generated on first
access from the registry, so ops that a plugin registers appear here too, with docstrings
built from their records.
"""

from __future__ import annotations

import copy as _copy
from typing import Any, Iterable, Sequence

import numpy as np

from .attribute import AttrScope
from .errors import AttrError, GraphError, format_error
from .ir import Graph, IndexedGraph, Node, NodeEntry, post_order
from .name import NameManager
from .params import DTYPES, KINDS, parse_value, Param, to_string

__all__ = ["Symbol", "Variable", "Group", "var"]


class Symbol:
    """A list of output entries of a graph under construction."""

    __slots__ = ("outputs",)

    def __init__(self, outputs: Sequence[NodeEntry]):
        self.outputs = list(outputs)

    # -- introspection -----------------------------------------------------------------------
    @property
    def name(self) -> str | None:
        return self.outputs[0].node.name if len(self.outputs) == 1 else None

    def __len__(self) -> int:
        return len(self.outputs)

    def __iter__(self):
        return (Symbol([e]) for e in self.outputs)

    def __getitem__(self, key: int | str) -> "Symbol":
        if isinstance(key, str):
            names = self.list_output_names()
            if key not in names:
                raise GraphError(f"symbol: no output named '{key}'; outputs are {names}")
            key = names.index(key)
        if not -len(self.outputs) <= key < len(self.outputs):
            raise GraphError(f"symbol: output index {key} out of range; the symbol has "
                             f"{len(self.outputs)} output(s)")
        return Symbol([self.outputs[key]])

    def _nodes(self) -> list[Node]:
        return post_order(e.node for e in self.outputs)

    def list_input_variables(self, option: str = "all") -> list["Symbol"]:
        """Variables read by the symbol: ``all``, ``read_only`` or ``aux_state`` (mutated)."""
        if option not in ("all", "read_only", "aux_state"):
            raise AttrError(f"list_input_names: option must be 'all', 'read_only' or "
                            f"'aux_state'; got {option!r}")
        idx = IndexedGraph(self.outputs)
        out = []
        for nid in idx.input_nodes:
            mutated = nid in idx.mutable_input_nodes
            if option == "all" or (option == "aux_state") == mutated:
                out.append(Symbol([NodeEntry(idx.nodes[nid], 0, 0)]))
        return out

    def list_input_names(self, option: str = "all") -> list[str]:
        return [s.outputs[0].node.name for s in self.list_input_variables(option)]

    def list_output_names(self) -> list[str]:
        names = []
        for e in self.outputs:
            n = e.node
            if n.op is None:
                names.append(n.name)
            else:
                names.append(f"{n.name}_{n.op.output_names(n.attrs)[e.index]}")
        return names

    def get_internals(self) -> "Symbol":
        """Every output of every node, in topological order."""
        return Symbol([NodeEntry(n, i, 0) for n in self._nodes() for i in range(n.num_outputs)])

    def get_children(self) -> "Symbol | None":
        """The inputs of the head node(s), or None for a variable."""
        entries = [i for e in self.outputs for i in e.node.inputs]
        return Symbol(entries) if entries else None

    def attr(self, key: str) -> str | None:
        """Attribute ``key`` of the single head node, in NNVM's string form."""
        node = self._head("attr")
        return None if key not in node.attrs else to_string(node.attrs[key])

    def list_attr(self, recursive: bool = False) -> dict[str, str]:
        """Head attributes; with ``recursive``, every node's as ``name$key``."""
        if not recursive:
            return {k: to_string(v) for k, v in self._head("list_attr").attrs.items()}
        return {f"{n.name}${k}": to_string(v) for n in self._nodes() for k, v in n.attrs.items()}

    def _set_attr(self, **attrs: Any) -> None:
        node = self._head("_set_attr")
        for k, v in attrs.items():
            if node.op is not None and k in node.op.params:
                v = parse_value(node.op.params[k], v, f"node '{node.name}'")
            node.attrs[k] = v
        node._nout = None

    def _add_control_deps(self, deps: "Symbol") -> None:
        node = self._head("_add_control_deps")
        node.control_deps.extend(e.node for e in deps.outputs)

    def _head(self, what: str) -> Node:
        if len(self.outputs) != 1:
            raise GraphError(f"symbol.{what}: needs a single-output symbol; this one has "
                             f"{len(self.outputs)} outputs. Select one with sym[i]")
        return self.outputs[0].node

    def debug_str(self) -> str:
        return Graph(self.outputs).ir()

    def __repr__(self) -> str:
        names = ", ".join(self.list_output_names())
        return f"<Symbol {names}>"

    # -- composition -------------------------------------------------------------------------
    def __call__(self, *args: "Symbol", name: str | None = None, **kwargs: "Symbol") -> "Symbol":
        """Substitute free variables: positionally in ``list_input_names`` order, or by name."""
        free = self.list_input_names()
        subst: dict[str, Symbol] = {}
        if len(args) > len(free):
            raise GraphError(f"compose: {len(args)} positional inputs for a symbol with "
                             f"{len(free)} free variables ({', '.join(free)})")
        subst.update(zip(free, args))
        for k, v in kwargs.items():
            if k not in free:
                raise GraphError(f"compose: keyword '{k}' names no free variable; valid: "
                                 f"{', '.join(free)}")
            subst[k] = v
        for k, v in subst.items():
            if not isinstance(v, Symbol) or len(v.outputs) != 1:
                raise GraphError(f"compose: value for '{k}' must be a single-output Symbol")
        mapping: dict[int, list[NodeEntry]] = {}
        for n in self._nodes():
            if n.op is None and n.name in subst:
                mapping[id(n)] = subst[n.name].outputs
                continue
            new = Node(n.op, n.name, n.attrs, [mapping[id(e.node)][e.index]._replace(
                version=e.version) for e in n.inputs],
                [mapping[id(c)][0].node for c in n.control_deps], n.subgraphs)
            new.info = n.info
            if name and len(self.outputs) == 1 and n is self.outputs[0].node:
                new.name = name
            mapping[id(n)] = [NodeEntry(new, i, 0) for i in range(new.num_outputs)]
        return Symbol([mapping[id(e.node)][e.index] for e in self.outputs])

    def __copy__(self) -> "Symbol":
        return self.__deepcopy__({})

    def __deepcopy__(self, memo) -> "Symbol":
        mapping: dict[int, Node] = {}
        for n in self._nodes():
            new = Node(n.op, n.name, _copy.deepcopy(n.attrs),
                       [NodeEntry(mapping[id(e.node)], e.index, e.version) for e in n.inputs],
                       [mapping[id(c)] for c in n.control_deps], n.subgraphs)
            new.info = dict(n.info)
            mapping[id(n)] = new
        return Symbol([NodeEntry(mapping[id(e.node)], e.index, e.version) for e in self.outputs])

    # -- operator overloading ----------------------------------------------------------------
    def _binary(self, other, sym_op: str, scalar_op: str) -> "Symbol":
        if isinstance(other, Symbol):
            return _call_op(sym_op, self, other)
        if isinstance(other, (int, float, np.number)) and not isinstance(other, bool):
            return _call_op(scalar_op, self, scalar=float(other))
        return NotImplemented

    def __add__(self, o): return self._binary(o, "broadcast_add", "__add_scalar__")
    def __radd__(self, o): return self._binary(o, "broadcast_add", "__add_scalar__")
    def __sub__(self, o): return self._binary(o, "broadcast_sub", "__sub_scalar__")
    def __rsub__(self, o): return self._binary(o, "broadcast_sub", "__rsub_scalar__")
    def __mul__(self, o): return self._binary(o, "broadcast_mul", "__mul_scalar__")
    def __rmul__(self, o): return self._binary(o, "broadcast_mul", "__mul_scalar__")
    def __truediv__(self, o): return self._binary(o, "broadcast_div", "__div_scalar__")
    def __rtruediv__(self, o): return self._binary(o, "broadcast_div", "__rdiv_scalar__")
    def __pow__(self, o): return self._binary(o, "broadcast_pow", "__pow_scalar__")
    def __rpow__(self, o): return self._binary(o, "broadcast_pow", "__rpow_scalar__")
    def __neg__(self): return _call_op("negative", self)
    __hash__ = object.__hash__


def Variable(name: str, init: Any = None, shape: Sequence[int] | None = None,
             dtype: str | None = None, **attrs: Any) -> Symbol:
    """A named input. ``shape``/``dtype`` seed shape and type inference; ``init`` (an array)
    is used as the parameter value by ``nnvm.compiler.build`` when ``params`` lacks it."""
    if not isinstance(name, str) or not name:
        raise AttrError(f"Variable: name must be a non-empty string; got {name!r}")
    merged = AttrScope.current_attrs()
    merged.update(attrs)
    if shape is not None:
        merged["shape"] = parse_value(Param("shape", "ints"), shape, f"variable '{name}'")
    if dtype is not None:
        merged["dtype"] = parse_value(Param("dtype", "dtype"), dtype, f"variable '{name}'")
    node = Node(None, name, merged)
    if init is not None:
        node.info["init"] = np.asarray(init)
    return Symbol([NodeEntry(node, 0, 0)])


var = Variable


def Group(symbols: Iterable[Symbol]) -> Symbol:
    """One symbol whose outputs are all outputs of ``symbols``, in order."""
    outs = []
    for s in symbols:
        if not isinstance(s, Symbol):
            raise GraphError(f"Group: expected Symbols; got {type(s).__name__}")
        outs.extend(s.outputs)
    return Symbol(outs)


def _call_op(op_name: str, *args: Any, name: str | None = None, attr: dict | None = None,
             **kwargs: Any) -> Symbol:
    from .op import get_op

    op = get_op(op_name)
    name = NameManager.current().get(name, op.name)
    where = f"node '{name}' (op {op.name})"
    inputs_kw = {k: v for k, v in kwargs.items() if isinstance(v, Symbol)}
    raw = {k: v for k, v in kwargs.items() if not isinstance(v, Symbol)}
    for a in args:
        if not isinstance(a, Symbol):
            raise AttrError(format_error(where, "positional arguments must be Symbols",
                                         got=type(a).__name__,
                                         fix="Pass attributes by keyword"))
    if op.is_variadic:
        if inputs_kw:
            raise GraphError(format_error(where, "a variadic op takes its inputs positionally",
                                          fix=f"Call {op.name}(a, b, ...)"))
        raw.setdefault("num_args", len(args))
    attrs = op.parse_attrs(raw, where)
    names = op.input_names(attrs)
    unknown = [k for k in inputs_kw if k not in names]
    if unknown:
        raise GraphError(format_error(where, f"unknown input '{unknown[0]}'",
                                      fix=f"Inputs of {op.name}: {', '.join(names)}"))
    if len(args) > len(names):
        raise GraphError(format_error(where, "too many positional inputs", len(names), len(args),
                                      fix=f"Inputs of {op.name}: {', '.join(names)}"))
    given = dict(zip(names, args))
    for k, v in inputs_kw.items():
        if k in given:
            raise GraphError(format_error(where, f"input '{k}' given twice"))
        given[k] = v
    entries = []
    for arg in names:
        s = given.get(arg)
        if s is None:
            s = Variable(f"{name}_{arg}")
        if len(s.outputs) != 1:
            raise GraphError(format_error(where, f"input '{arg}' has {len(s.outputs)} outputs",
                                          1, len(s.outputs), fix="Select one with sym[i]"))
        entries.append(s.outputs[0])
    for k, v in AttrScope().get(attr).items():
        attrs.setdefault(k, v)
    entries = _versioned(op, attrs, entries, where)
    node = Node(op, name, attrs, entries)
    return Symbol([NodeEntry(node, i, 0) for i in range(op.num_visible_outputs(attrs))])


def _versioned(op, attrs: dict, entries: list[NodeEntry], where: str) -> list[NodeEntry]:
    """NNVM's UpdateNodeVersion: a variable input reads the variable's current version, and
    an input the op mutates (FMutateInputs) bumps it; the OrderMutation pass orders by it."""
    f = op.get_attr("FMutateInputs")
    mutated = set(f(attrs)) if f is not None else set()
    out = []
    for i, e in enumerate(entries):
        if e.node.op is None:
            version = e.node.info.get("version", 0) + (i in mutated)
            e.node.info["version"] = version
            e = e._replace(version=version)
        elif i in mutated:
            raise GraphError(format_error(where, f"input {i} is mutated but is not a Variable",
                                          fix="Only variables can be assigned"))
        out.append(e)
    return out


def _make_op_function(op) -> Any:
    def fn(*args: Any, **kwargs: Any) -> Symbol:
        return _call_op(op.name, *args, **kwargs)

    fn.__name__ = op.name
    fn.__qualname__ = op.name
    fn.__doc__ = op_docstring(op)
    return fn


def op_docstring(op) -> str:
    """Google-style docstring generated from an op record."""
    lines = [op.doc.strip(), "", "Args:"]
    try:
        inputs = op.input_names({p.name: p.default for p in op.params.values()
                                 if not p.required})
    except Exception:  # noqa: BLE001 - input names may need a required attribute
        inputs = ["*inputs"]
    for i in inputs:
        lines.append(f"    {i} (Symbol): input; auto-created as a variable when omitted.")
    for p in op.params.values():
        default = "required" if p.required else f"default {p.default!r}"
        lines.append(f"    {p.name} ({KINDS[p.kind]}, {default}): {p.doc}")
    lines += ["    name (str): node name.", "    attr (dict): extra string annotations.",
              "", "Returns:", "    Symbol: the op's visible outputs."]
    if op.aliases:
        lines += ["", f"Aliases: {', '.join(op.aliases)}"]
    return "\n".join(lines)


def __getattr__(name: str):
    from .errors import OpNotFoundError
    from .op import get_op

    if name.startswith("__") and name.endswith("__") and not name.endswith("_scalar__") \
            and not name.endswith("_symbol__"):
        raise AttributeError(name)
    try:
        op = get_op(name)
    except OpNotFoundError as exc:
        raise AttributeError(str(exc)) from None
    fn = _make_op_function(op)
    globals()[name] = fn
    return fn


def __dir__() -> list[str]:
    from .op import list_op_names

    return sorted(set(globals()) | set(list_op_names()))


_ = DTYPES  # re-exported for users building dtype lists
