"""Operator registry: ops are records with open, typed attributes that any plugin can extend.

An op declares its inputs, outputs and typed parameters once; everything else (shape rule,
dtype rule, reference kernel, gradient, fusion pattern, a backend's lowering) is an *attribute*
keyed by a string such as ``"FInferShape"``. Any plugin may add an attribute to any op later, and
a higher ``plevel`` overrides a lower one, as in NNVM's ``set_attr<T>(key, value, plevel)``.

Standard attribute keys (NNVM's, with Python signatures):

========================  ================================================================
``FInferShape``           ``f(attrs, in_shapes, out_shapes) -> (in_shapes, out_shapes)``;
                          lists hold a tuple or None (unknown); may fill inputs too.
``FInferType``            same with dtype names; default: all inputs and outputs alike.
``FReference``            ``f(attrs, *arrays) -> array | tuple``: the NumPy reference kernel.
``FGradient``             ``f(node, out_grads) -> list[NodeEntry | None]``, one per input.
``FInplaceOption``        ``f(attrs) -> [(in_index, out_index), ...]``
``FInplaceIdentity``      ``f(attrs) -> [bool, ...]`` per FInplaceOption pair.
``FIgnoreInputs``         ``f(attrs) -> [in_index, ...]``: inputs whose values are unused.
``FMutateInputs``         ``f(attrs) -> [in_index, ...]``: inputs the op writes.
``FListInputNames``       ``f(attrs) -> [name, ...]``
``FListOutputNames``      ``f(attrs) -> [name, ...]``
``FNumVisibleOutputs``    ``f(attrs) -> int``
``TOpPattern``            an ``OpPattern`` value used by fusion.
``FCorrectLayout``        ``f(attrs, in_layouts, out_layouts) -> (in_layouts, out_layouts)``
``TIsBackward``           bool: an explicit backward op.
========================  ================================================================
"""

from __future__ import annotations

import difflib
import enum
import sys
from typing import Any, Callable, Iterable, Sequence

from .errors import AttrError, OpNotFoundError, PluginError, format_error
from .params import Param, parse_value

DEFAULT_PLEVEL = 10


class OpPattern(enum.IntEnum):
    """Fusion pattern kinds, numbered as in NNVM (lower fuses more freely)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    OPAQUE = 8


class Op:
    """One registered operator: its signature plus a view on the open attribute table.

    Plugin author: do not construct directly; call ``register_op``.
    """

    def __init__(self, name: str, doc: str, params: Sequence[Param], support_level: int,
                 provider: str):
        self.name = name
        self.doc = doc
        self.params: dict[str, Param] = {p.name: p for p in params}
        self.support_level = support_level
        self.provider = provider
        self.aliases: list[str] = []

    # -- signature ---------------------------------------------------------------------------
    def input_names(self, attrs: dict) -> list[str]:
        return list(self.get_attr("FListInputNames")(attrs))

    def output_names(self, attrs: dict) -> list[str]:
        return list(self.get_attr("FListOutputNames")(attrs))

    def num_inputs(self, attrs: dict) -> int:
        return len(self.input_names(attrs))

    def num_outputs(self, attrs: dict) -> int:
        return len(self.output_names(attrs))

    def num_visible_outputs(self, attrs: dict) -> int:
        f = self.get_attr("FNumVisibleOutputs")
        return self.num_outputs(attrs) if f is None else int(f(attrs))

    @property
    def is_variadic(self) -> bool:
        return "num_args" in self.params

    def parse_attrs(self, raw: dict, where: str | None = None, strict: bool = True) -> dict:
        """Typed attributes from user values or NNVM strings, with defaults filled in.

        Keys the op does not declare are kept as free-form annotations only when they look
        like annotations (``__x__``) or when ``strict`` is False; otherwise they are an error
        that lists the valid parameters.
        """
        where = where or f"op {self.name}"
        out: dict[str, Any] = {}
        for key, value in raw.items():
            p = self.params.get(key)
            if p is None:
                if strict and not (key.startswith("__") and key.endswith("__")):
                    valid = ", ".join(self.params) or "(none)"
                    raise AttrError(format_error(where, f"unknown attribute '{key}'",
                                                 fix=f"Valid attributes of {self.name}: {valid}"))
                out[key] = value
                continue
            out[key] = parse_value(p, value, where)
        for p in self.params.values():
            if p.name not in out:
                if p.required:
                    raise AttrError(format_error(
                        where, f"required attribute '{p.name}' is missing",
                        fix=f"Pass {p.name}=... ({p.doc or p.kind})"))
                out[p.name] = p.default
        return out

    # -- open attributes --------------------------------------------------------------------
    def get_attr(self, key: str, default: Any = None) -> Any:
        return _ATTRS.get(key, {}).get(self.name, (default,))[0]

    def has_attr(self, key: str) -> bool:
        return self.name in _ATTRS.get(key, {})

    def set_attr(self, key: str, value: Any, plevel: int = DEFAULT_PLEVEL,
                 provider: str | None = None) -> "Op":
        set_op_attr(self.name, key, value, plevel, provider)
        return self

    def __repr__(self) -> str:
        return f"Op({self.name!r})"


_OPS: dict[str, Op] = {}
_ALIASES: dict[str, str] = {}
_ATTRS: dict[str, dict[str, tuple[Any, int, str]]] = {}
#: the plugin whose registration hooks are running (None outside them)
_current_provider: list[str | None] = [None]


def set_provider(name: str | None) -> None:
    """Record which plugin registrations come from (used by ``nnvm plugins``)."""
    _current_provider[0] = name


def current_provider(module: str) -> str:
    """Who a registration made from ``module`` is credited to: the plugin whose hooks are
    running, else the plugin that module belongs to (an import before the plugins loaded)."""
    if _current_provider[0] is not None:
        return _current_provider[0]
    from . import plugin_manager

    return plugin_manager.plugin_of_module(module)


def _names_fn(names: Sequence[str] | Callable[[dict], Sequence[str]]) -> Callable:
    if callable(names):
        return names
    frozen = tuple(names)
    return lambda attrs: frozen


def register_op(name: str, *, doc: str, inputs: Sequence[str] | Callable = ("data",),
                outputs: Sequence[str] | Callable = ("output",), params: Iterable[Param] = (),
                shape: Callable | None = None, dtype: Callable | None = None,
                reference: Callable | None = None, gradient: Callable | None = None,
                pattern: OpPattern | None = None, inplace: Callable | None = None,
                aliases: Iterable[str] = (), support_level: int = 10,
                **attrs: Any) -> Op:
    """Register an operator with its rules side by side.

    Args:
        name: the op name, snake_case; internal ops start with ``_``.
        doc: one paragraph, shown in the generated ``nnvm.sym.<name>`` docstring.
        inputs: input names, or ``f(attrs) -> names`` (variadic ops, optional bias).
        outputs: output names, or ``f(attrs) -> names``.
        params: the typed parameters.
        shape: FInferShape.  dtype: FInferType.  reference: FReference (NumPy kernel).
        gradient: FGradient.  pattern: TOpPattern.  inplace: FInplaceOption.
        aliases: other names that resolve to this op.
        support_level: documentation level as in NNVM (1 = basic ... 5 = vision).
        **attrs: any further attribute keys (``FMutateInputs=...``).

    Raises:
        PluginError: the name is already registered.
    """
    provider = current_provider(sys._getframe(1).f_globals.get("__name__", ""))
    if name in _OPS or name in _ALIASES:
        other = _OPS.get(name) or _OPS[_ALIASES[name]]
        raise PluginError(format_error(
            f"register_op('{name}') from {provider}", "the op name is taken",
            fix=f"It was registered by {other.provider}; pick another name or override single "
                f"attributes with set_op_attr(..., plevel>{DEFAULT_PLEVEL})"))
    op = Op(name, doc, tuple(params), support_level, provider)
    _OPS[name] = op
    table = {"FListInputNames": _names_fn(inputs), "FListOutputNames": _names_fn(outputs),
             "FInferShape": shape, "FInferType": dtype, "FReference": reference,
             "FGradient": gradient, "TOpPattern": pattern, "FInplaceOption": inplace, **attrs}
    for key, value in table.items():
        if value is not None:
            set_op_attr(name, key, value, DEFAULT_PLEVEL, provider)
    for alias in aliases:
        add_alias(name, alias)
    return op


def add_alias(name: str, alias: str) -> None:
    """Make ``alias`` resolve to op ``name`` (NNVM's ``add_alias``)."""
    if alias in _OPS or alias in _ALIASES:
        raise PluginError(f"add_alias('{name}', '{alias}'): the name '{alias}' is taken")
    _ALIASES[alias] = name
    _OPS[name].aliases.append(alias)


def set_op_attr(op_name: str, key: str, value: Any, plevel: int = DEFAULT_PLEVEL,
                provider: str | None = None) -> None:
    """Set attribute ``key`` of an op; a higher ``plevel`` overrides, an equal one is an error."""
    op = get_op(op_name)
    provider = provider or current_provider(sys._getframe(1).f_globals.get("__name__", ""))
    table = _ATTRS.setdefault(key, {})
    if op.name in table:
        _, old_level, old_provider = table[op.name]
        if plevel == old_level:
            raise PluginError(format_error(
                f"set_op_attr('{op.name}', '{key}') from {provider}",
                f"already set at plevel {plevel} by {old_provider}",
                fix="Use a higher plevel to override"))
        if plevel < old_level:
            return
    table[op.name] = (value, plevel, provider)


def get_op(name: str) -> Op:
    """The op registered as ``name`` (or an alias of it).

    Raises:
        OpNotFoundError: with the closest registered names.
    """
    from . import plugin_manager

    op = plugin_manager.find(lambda: _OPS.get(name) or _OPS.get(_ALIASES.get(name, "")))
    if op is None:
        close = difflib.get_close_matches(name, list(_OPS) + list(_ALIASES), n=5)
        hint = f"Did you mean: {', '.join(close)}?" if close else \
            "Run `nnvm plugins` to see which plugins provide operators"
        raise OpNotFoundError(format_error(f"operator '{name}'", "is not registered", fix=hint))
    return op


def list_op_names() -> list[str]:
    """Every registered op name (aliases excluded), sorted."""
    _ensure_plugins()
    return sorted(_OPS)


def get_attr_map(key: str) -> dict[str, Any]:
    """``{op_name: value}`` for one attribute key."""
    _ensure_plugins()
    return {name: v for name, (v, _, _) in _ATTRS.get(key, {}).items()}


def attr_provider(op_name: str, key: str) -> str | None:
    entry = _ATTRS.get(key, {}).get(get_op(op_name).name)
    return None if entry is None else entry[2]


def _ensure_plugins() -> None:
    from . import plugin_manager as plugins

    plugins.load()
