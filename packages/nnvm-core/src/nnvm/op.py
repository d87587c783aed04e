"""Operator registry: ops are records with open, typed attributes that any plugin can extend.

An op declares its inputs, outputs and typed parameters once; everything else (shape rule,
dtype rule, reference kernel, gradient, fusion pattern, a backend's lowering) is an *attribute*
keyed by a string such as ``"FInferShape"``. Any plugin may add an attribute to any op later, and
a higher ``plevel`` overrides a lower one, as in NNVM's ``set_attr<T>(key, value, plevel)``.

Plugins (core included) hand the registry *records* from their ``nnvm_ops`` hook: ``OpDef``
(built with ``define_op``, or ``OpSet.op`` in an op module), ``OpAttrDef`` and
``LazyOpFamily`` (ops whose module is imported when one of them is first looked up: core's
families are returned this way). Building a record registers nothing; ``register_records``
adds a plugin's records all or none, credited to that plugin, so credit never depends on
import order. An ``OpAttrDef`` naming an op whose family is not loaded yet waits, already
checked, and applies when the family loads.

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

import dataclasses
import difflib
import enum
import importlib
import threading
from typing import Any, Callable, Iterable, Mapping, Sequence

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

    Plugin author: do not construct directly; return an ``OpDef`` from ``nnvm_ops``.
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
                 provider: str = "user") -> "Op":
        set_op_attr(self.name, key, value, plevel, provider)
        return self

    def __repr__(self) -> str:
        return f"Op({self.name!r})"


_OPS: dict[str, Op] = {}
_ALIASES: dict[str, str] = {}
_ATTRS: dict[str, dict[str, tuple[Any, int, str]]] = {}
#: op or alias name -> (its LazyOpFamily, the provider), until the family is loaded
_LAZY: dict[str, tuple["LazyOpFamily", str]] = {}
#: op name -> [(key, value, plevel, provider)]: checked OpAttrDefs waiting for its family
_PENDING: dict[str, list[tuple[str, Any, int, str]]] = {}
#: held while a family loads: another thread's lookup waits instead of seeing half an op
_family_lock = threading.RLock()


def _names_fn(names: Sequence[str] | Callable[[dict], Sequence[str]]) -> Callable:
    if callable(names):
        return names
    frozen = tuple(names)
    return lambda attrs: frozen


@dataclasses.dataclass(frozen=True)
class OpDef:
    """A new operator as a plugin's ``nnvm_ops`` hook returns it (build it with ``define_op``).

    Why a record: defining one registers nothing, so importing an op module has no side
    effect, and the registry credits the op to the plugin whose hook returned it.
    ``attrs`` holds the whole attribute table (``FInferShape``, ``FReference``, ...).
    """

    name: str
    doc: str
    params: tuple[Param, ...] = ()
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    support_level: int = 10


@dataclasses.dataclass(frozen=True)
class OpAttrDef:
    """An attribute set on an existing op (a backend's lowering, a faster kernel), returned
    from ``nnvm_ops``; a higher ``plevel`` overrides a lower one, an equal one is an error."""

    op: str
    key: str
    value: Any
    plevel: int = DEFAULT_PLEVEL


@dataclasses.dataclass(frozen=True, eq=False)
class LazyOpFamily:
    """Ops a plugin defines in a module that is imported only when one of them is first
    looked up, as returned from ``nnvm_ops`` (core returns its families this way).

    Why: importing every op module costs more than most graphs need; the registry knows
    from this record which names the module defines (and, for conflict checks of other
    plugins' ``OpAttrDef`` records, which attribute keys) without importing it.

    Attributes:
        source: ``"package.module:attribute"``, the attribute an iterable of ``OpDef``
            records (an ``OpSet``); ``OpAttrDef`` records belong in ``nnvm_ops`` itself.
        ops: ``{op name: attribute keys its OpDef sets}``, for the ops this family provides.
            Another op in the module is registered with them only if its name is free
            (a shadowed ``op_once`` op is not; an op added after the record was generated
            is, though a lookup finds it only after a miss loaded every family).
        aliases: ``{alias: op name}``.
    Build it with ``LazyOpFamily.of(source, records)`` in a generator script (core's:
    ``python -m nnvm.ops._make_index``), not at plugin load, which must import nothing.
    """

    source: str
    ops: Mapping[str, tuple[str, ...]]
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, source: str, records: Iterable[OpDef]) -> "LazyOpFamily":
        """The record describing ``records`` (the ops ``source`` names), keys sorted."""
        ops = _only_opdefs(records, source)
        return cls(source, {r.name: tuple(sorted(r.attrs)) for r in ops},
                   {a: r.name for r in ops for a in r.aliases})

    def load(self) -> list[OpDef]:
        """Import the module: all its ``OpDef`` records (checked to include ``ops``)."""
        module, _, attr = self.source.partition(":")
        records = getattr(importlib.import_module(module), attr or "defs")
        ops = _only_opdefs(records, self.source)
        missing = sorted(self.ops.keys() - {r.name for r in ops})
        if missing:
            raise PluginError(format_error(
                f"op family {self.source}", f"does not define {', '.join(missing[:5])}",
                "every op its LazyOpFamily record lists", f"{len(missing)} missing",
                fix="The record is stale: regenerate it (core's: python -m "
                    "nnvm.ops._make_index)"))
        return ops


def _only_opdefs(records: Iterable, source: str) -> list[OpDef]:
    records = list(records)
    for r in records:
        if not isinstance(r, OpDef):
            raise PluginError(format_error(
                f"op family {source}", "holds a record that is not an OpDef", "OpDef",
                repr(r)[:80], fix="Set the attribute in define_op(..., **attrs), or return "
                                  "the OpAttrDef from nnvm_ops"))
    return records


def define_op(name: str, *, doc: str, inputs: Sequence[str] | Callable = ("data",),
              outputs: Sequence[str] | Callable = ("output",), params: Iterable[Param] = (),
              shape: Callable | None = None, dtype: Callable | None = None,
              reference: Callable | None = None, gradient: Callable | None = None,
              pattern: OpPattern | None = None, inplace: Callable | None = None,
              aliases: Iterable[str] = (), support_level: int = 10,
              **attrs: Any) -> OpDef:
    """An ``OpDef`` with its rules side by side (registers nothing).

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
    """
    table = {"FListInputNames": _names_fn(inputs), "FListOutputNames": _names_fn(outputs),
             "FInferShape": shape, "FInferType": dtype, "FReference": reference,
             "FGradient": gradient, "TOpPattern": pattern, "FInplaceOption": inplace, **attrs}
    return OpDef(name, doc, tuple(params), {k: v for k, v in table.items() if v is not None},
                 tuple(aliases), support_level)


class OpSet:
    """One op module's records, in definition order: ``defs = OpSet("math")``, then
    ``defs.op(name, ...)`` and ``defs.attr(op, key, value)``; core's ``nnvm_ops`` hook returns
    them. ``op_once`` marks an op an earlier family may already define (that one wins)."""

    def __init__(self, family: str):
        self.family = family
        self.records: list[OpDef | OpAttrDef] = []
        self.once: set[str] = set()

    def op(self, name: str, **kw: Any) -> OpDef:
        record = define_op(name, **kw)
        self.records.append(record)
        return record

    def op_once(self, name: str, **kw: Any) -> OpDef:
        self.once.add(name)
        return self.op(name, **kw)

    def attr(self, op: str, key: str, value: Any, plevel: int = DEFAULT_PLEVEL) -> None:
        self.records.append(OpAttrDef(op, key, value, plevel))

    def get(self, name: str) -> OpDef:
        """This family's record of op ``name`` (another family's rules may build on it)."""
        return next(r for r in self.records if isinstance(r, OpDef) and r.name == name)

    def __iter__(self):
        return iter(self.records)


def register_records(records: Sequence[OpDef | OpAttrDef | LazyOpFamily],
                     provider: str) -> None:
    """Add ops and attributes credited to ``provider`` (the plugin whose hook returned them).

    All are checked before any is added, so a refused plugin leaves nothing behind. A
    ``LazyOpFamily`` only reserves its names; an ``OpAttrDef`` on one of them waits in
    ``_PENDING`` until the family loads.

    Raises:
        PluginError: an op name is taken, an attribute names an unknown op, or an attribute
            is already set at the same plevel.
    """
    check_records(records, provider)
    for r in records:
        if isinstance(r, LazyOpFamily):
            _LAZY.update(dict.fromkeys((*r.ops, *r.aliases), (r, provider)))
        elif isinstance(r, OpDef):
            _add_op(r, provider)
        else:
            with _family_lock:  # not while its family loads: the attr would be lost
                op = _resolve(r.op, load=False)
                if op is not None:
                    _set_attr(op.name, r.key, r.value, r.plevel, provider)
                else:
                    _PENDING.setdefault(_lazy_name(r.op), []).append(
                        (r.key, r.value, r.plevel, provider))


def _add_op(r: OpDef, provider: str) -> None:
    """Register one checked OpDef: attributes and aliases first, the op last, so a lookup
    in another thread never finds the op without its rules."""
    for key, value in r.attrs.items():
        _set_attr(r.name, key, value, DEFAULT_PLEVEL, provider)
    for key, value, plevel, by in _PENDING.pop(r.name, ()):
        _set_attr(r.name, key, value, plevel, by)
    _ALIASES.update(dict.fromkeys(r.aliases, r.name))
    op = Op(r.name, r.doc, r.params, r.support_level, provider)
    op.aliases.extend(r.aliases)
    _OPS[r.name] = op


def _lazy_name(name: str) -> str:
    """The op name ``name`` (an op or alias of a family not loaded yet) stands for."""
    family = _LAZY[name][0]
    return family.aliases.get(name, name)


def _load_family(family: LazyOpFamily, provider: str) -> None:
    """Import ``family`` and register its ops credited to ``provider``, with the
    OpAttrDefs other plugins set on them meanwhile (checked when they were registered)."""
    with _family_lock:
        if _LAZY.get(next(iter(family.ops), ""), (None,))[0] is not family:
            return  # loaded by another thread meanwhile
        for r in family.load():
            if r.name in family.ops or not any(map(_taken, (r.name, *r.aliases))):
                _add_op(r, provider)
        for name in (*family.ops, *family.aliases):
            _LAZY.pop(name, None)


def _taken(name: str) -> bool:
    return name in _OPS or name in _ALIASES or name in _LAZY


def load_all_families() -> None:
    """Load every op family not loaded yet (what enumerating all ops needs)."""
    for family, provider in list(dict.fromkeys(_LAZY.values())):
        _load_family(family, provider)


def check_records(records: Sequence[OpDef | OpAttrDef | LazyOpFamily], provider: str) -> None:
    """Raise ``PluginError`` for the first record ``register_records`` would refuse."""
    owner = {n: o.provider for n, o in _OPS.items()}
    alias_of = dict(_ALIASES)
    for name, (family, by) in _LAZY.items():
        owner[name] = by
        if name in family.aliases:
            alias_of[name] = family.aliases[name]
    levels = _attr_levels()
    for r in records:
        if isinstance(r, (OpDef, LazyOpFamily)):
            defined = {r.name: r.attrs} if isinstance(r, OpDef) else r.ops
            aliases = dict.fromkeys(r.aliases, r.name) if isinstance(r, OpDef) else r.aliases
            what = f"op '{r.name}'" if isinstance(r, OpDef) else f"op family {r.source}"
            for name in (*defined, *aliases):
                if name in owner or name in alias_of:
                    raise PluginError(format_error(
                        f"{what} from {provider}", f"the name '{name}' is taken",
                        fix=f"It was registered by {owner.get(name) or owner[alias_of[name]]}; "
                            f"pick another name or override single attributes with "
                            f"OpAttrDef(..., plevel>{DEFAULT_PLEVEL})"))
            stray = sorted(set(aliases.values()) - set(defined))
            if stray:
                raise PluginError(format_error(f"{what} from {provider}",
                                               f"has aliases of ops it does not define: {stray}",
                                               fix="Alias only the family's own ops"))
            owner.update(dict.fromkeys(defined, provider))
            alias_of.update(aliases)
            levels.update({(k, op): (DEFAULT_PLEVEL, provider)
                           for op, keys in defined.items() for k in keys})
            continue
        target = alias_of.get(r.op, r.op)
        where = f"OpAttrDef('{r.op}', '{r.key}') from {provider}"
        if target not in owner:
            raise PluginError(format_error(
                where, "names no registered op",
                fix="Define the op first (OpDef) or check the name with `nnvm ops`"))
        old = levels.get((r.key, target))
        if old is not None and old[0] == r.plevel:
            raise PluginError(format_error(where, f"already set at plevel {r.plevel} by "
                                                  f"{old[1]}", fix="Use a higher plevel to override"))
        if old is None or r.plevel > old[0]:
            levels[(r.key, target)] = (r.plevel, provider)


def _attr_levels() -> dict[tuple[str, str], tuple[int, str]]:
    """``{(key, op): (plevel, provider)}`` of the attributes in force, counting those that
    families not loaded yet and the OpAttrDefs waiting for them will set."""
    levels = {(key, op): entry[1:] for key, table in _ATTRS.items() for op, entry in table.items()}
    for family, by in dict.fromkeys(_LAZY.values()):
        levels.update({(k, op): (DEFAULT_PLEVEL, by) for op, keys in family.ops.items()
                       for k in keys})
    for op, entries in _PENDING.items():
        for key, _, plevel, by in entries:
            if plevel > levels.get((key, op), (plevel - 1,))[0]:
                levels[(key, op)] = (plevel, by)
    return levels


def register_op(name: str, *, provider: str = "user", **kw: Any) -> Op:
    """Define and register one op now, credited to ``provider`` (tests, notebooks; a plugin
    returns ``define_op(...)`` records from its ``nnvm_ops`` hook instead).

    Raises:
        PluginError: the name is already registered.
    """
    register_records([define_op(name, **kw)], provider)
    return _OPS[name]


def add_alias(name: str, alias: str) -> None:
    """Make ``alias`` resolve to op ``name`` (NNVM's ``add_alias``)."""
    if _taken(alias):
        raise PluginError(f"add_alias('{name}', '{alias}'): the name '{alias}' is taken")
    op = get_op(name)
    _ALIASES[alias] = op.name
    op.aliases.append(alias)


def set_op_attr(op_name: str, key: str, value: Any, plevel: int = DEFAULT_PLEVEL,
                provider: str = "user") -> None:
    """Set attribute ``key`` of an op now; a higher ``plevel`` overrides, an equal one is an
    error (a plugin returns ``OpAttrDef`` records from ``nnvm_ops`` instead)."""
    _set_attr(get_op(op_name).name, key, value, plevel, provider)


def _set_attr(name: str, key: str, value: Any, plevel: int, provider: str) -> None:
    table = _ATTRS.setdefault(key, {})
    if name in table:
        _, old_level, old_provider = table[name]
        if plevel == old_level:
            raise PluginError(format_error(
                f"set_op_attr('{name}', '{key}') from {provider}",
                f"already set at plevel {plevel} by {old_provider}",
                fix="Use a higher plevel to override"))
        if plevel < old_level:
            return
    table[name] = (value, plevel, provider)


def _resolve(name: str, load: bool = True) -> Op | None:
    """The op ``name`` or an alias names; ``load``: importing its family if not loaded yet."""
    op = _OPS.get(name) or _OPS.get(_ALIASES.get(name, ""))
    lazy = _LAZY.get(name) if op is None and load else None
    if lazy is not None:
        _load_family(*lazy)
        op = _OPS.get(name) or _OPS.get(_ALIASES.get(name, ""))
    return op


def _resolve_anywhere(name: str) -> Op | None:
    """``_resolve``, then after loading every family (an op its family's generated record
    does not list yet is found only that way)."""
    op = _resolve(name)
    if op is None and _LAZY:
        load_all_families()
        op = _resolve(name)
    return op


def get_op(name: str) -> Op:
    """The op registered as ``name`` (or an alias of it).

    Raises:
        OpNotFoundError: with the closest registered names.
    """
    from . import plugin_manager

    op = plugin_manager.find(lambda: _resolve(name)) or _resolve_anywhere(name)
    if op is None:
        close = difflib.get_close_matches(name, list(_OPS) + list(_ALIASES), n=5)
        hint = f"Did you mean: {', '.join(close)}?" if close else \
            "Run `nnvm plugins` to see which plugins provide operators"
        raise OpNotFoundError(format_error(f"operator '{name}'", "is not registered", fix=hint))
    return op


def list_op_names() -> list[str]:
    """Every registered op name (aliases excluded), sorted; loads every op family."""
    _ensure_plugins()
    return sorted(_OPS)


def get_attr_map(key: str) -> dict[str, Any]:
    """``{op_name: value}`` for one attribute key; loads every op family."""
    _ensure_plugins()
    return {name: v for name, (v, _, _) in _ATTRS.get(key, {}).items()}


def attr_provider(op_name: str, key: str) -> str | None:
    name = get_op(op_name).name  # first: loading its family may add the key's table
    entry = _ATTRS.get(key, {}).get(name)
    return None if entry is None else entry[2]


def _ensure_plugins() -> None:
    """Every plugin and every op family loaded: for questions about all ops."""
    from . import plugin_manager as plugins

    plugins.load()
    load_all_families()
