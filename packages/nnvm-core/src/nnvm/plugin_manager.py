"""Plugin discovery and loading (pluggy, entry-point group ``nnvm``).

Loading is lazy and in two steps. ``activate(names)`` loads core's built-in plugin and the
named entry points only: ``nnvm.runtime.load`` activates the plugins an artifact's manifest
names, and ``get_backend("llvm")`` the entry point named after the target, so running an
artifact imports no frontend, pass or unrelated backend package. ``load()`` is the full
discovery (every entry point): lookups (``find``) fall back to it on a miss, and every
registry-wide question (listing ops, passes or targets, ``plugins()``) starts with it, so what
users see is unchanged except import cost.

Registering a plugin calls its record hooks (``nnvm_ops``, ``nnvm_passes``, ``nnvm_targets``,
``nnvm_frontends``; the deprecated ``nnvm_register_*`` ones through ``_LegacyRegistry``),
checks every record, then adds them all credited to the plugin's name. A plugin that fails to
import is recorded as unavailable with the reason; one whose hooks raise, return the wrong
items, clash with registered names or are not nnvm hooks (a typo) is recorded as broken, with
the fix, and unregistered. Neither is raised at discovery; only core's own failure is.
Availability (device probes, toolchains: pyopencl, CuPy, nvcc) is asked for only when
``plugins()`` reports it, so building for ``reference`` probes no hardware.
``NNVM_DISABLE_PLUGIN_AUTOLOAD=1`` loads only core (plus the names in ``NNVM_PLUGINS``,
comma-separated); ``NNVM_TRACE_PLUGINS=1`` prints every hook call.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import os
import sys
import threading
import warnings
from typing import Any

import pluggy

from . import hookspecs
from .errors import NNVMError, PluginError, format_error

_lock = threading.RLock()
#: ``loading``: the id of the thread registering plugins (None when none is)
_state: dict[str, Any] = {"loaded": False, "loading": None}


@dataclasses.dataclass
class PluginInfo:
    """What ``nnvm.plugins()`` reports for one plugin."""

    name: str
    version: str
    module: str
    available: bool
    reason: str | None = None
    summary: str = ""
    provides: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    #: its hooks are wrong (raise, return the wrong records, or are not nnvm hooks): nothing
    #: it provides is registered, and ``reason`` says what to fix
    broken: bool = False

    def __str__(self) -> str:
        state = "available" if self.available else f"unavailable: {self.reason}"
        parts = [f"{k}: {', '.join(v)}" for k, v in self.provides.items() if v]
        return f"{self.name} {self.version} ({state})" + ("\n  " + "\n  ".join(parts)
                                                          if parts else "")


_infos: dict[str, PluginInfo] = {}
_backends: dict[str, Any] = {}
_frontends: dict[str, Any] = {}
#: plugin name -> (its backends, its frontends) whose availability ``plugins()`` has yet to ask
_unprobed: dict[str, tuple[list, list]] = {}


def get_plugin_manager() -> pluggy.PluginManager:
    load()
    return _state["pm"]


def load() -> None:
    """Load core and every plugin once (thread-safe, re-entrant during loading)."""
    _register_once(lambda name: True, full=True)


def activate(names) -> None:
    """Load core and the entry points called ``names`` only (those not installed are skipped:
    a lookup that then misses does the full ``load()``). Why: loading an artifact needs the
    plugins that provided its ops and target, not every installed package."""
    wanted = set(names)
    if not (wanted <= set(_infos) and "pm" in _state and _state["loading"] is None):
        _register_once(wanted.__contains__)


def _register_once(wanted, full: bool = False) -> None:
    """Register the entry points ``wanted`` accepts, under the lock; a lookup made by a
    plugin's own registration (re-entrant) or after the full load returns at once, and one
    from another thread waits until the registering thread is done."""
    if _state["loaded"] or _state["loading"] == threading.get_ident():
        return
    with _lock:
        if _state["loaded"] or _state["loading"] is not None:
            return
        _state["loading"] = threading.get_ident()
        try:
            _register_entry_points(wanted)
            _state["loaded"] = full
        finally:
            _state["loading"] = None


def find(lookup, plugin: str | None = None):
    """``lookup()`` among the active plugins; on a miss after activating the entry point
    ``plugin`` (if given), then after the full ``load()``. None when nothing provides it."""
    found = lookup()
    if found is None and plugin is not None:
        activate([plugin])
        found = lookup()
    if found is None:
        load()
        found = lookup()
    return found


def find_backend(kind: str) -> Any:
    """The backend of target ``kind`` (None if no plugin has it): among the active plugins,
    else after activating the entry point named ``kind`` (the llvm plugin is ``llvm``), which
    also applies the op attributes that plugin sets, else after loading all."""
    return find(lambda: _backends.get(kind), plugin=kind)


def providers_of(op_names, target: str) -> list[str]:
    """The plugins an artifact needs to run: those that provided the ops ``op_names`` or set
    any of their attributes (a plugin may override a core op's kernel), and the one that
    provides ``target``'s backend (its first word). Recorded in the manifest at export."""
    from . import op

    load()
    names = set()
    for name in op_names:
        o = op.get_op(name)
        names |= {o.provider} | {e[2] for table in op._ATTRS.values() if (e := table.get(o.name))}
    kind = (target.split() or [target])[0]
    names |= {p for p, info in _infos.items() if kind in info.provides.get("targets", ())}
    return sorted(names)


def _register_entry_points(wanted) -> None:
    """Register core (once) and every entry point whose name ``wanted(name)`` accepts and
    that is not registered yet; ``NNVM_DISABLE_PLUGIN_AUTOLOAD`` limits both."""
    from . import _builtin

    if "pm" not in _state:
        pm = pluggy.PluginManager("nnvm")
        pm.add_hookspecs(hookspecs)
        if os.environ.get("NNVM_TRACE_PLUGINS"):
            pm.trace.root.setwriter(lambda msg: sys.stderr.write(f"[nnvm-plugins] {msg}"))
            pm.enable_tracing()
        _state["pm"] = pm
        _add(pm, _builtin, "nnvm", "")
        _infos["nnvm"] = PluginInfo("nnvm", _version("nnvm-core"), "nnvm._builtin", True,
                                    summary="core: IR, standard ops, InferShape/InferType, "
                                            "reference target")
        _register_from(pm, "nnvm")
    pm = _state["pm"]
    only = None
    if os.environ.get("NNVM_DISABLE_PLUGIN_AUTOLOAD"):
        only = {s.strip() for s in os.environ.get("NNVM_PLUGINS", "").split(",") if s.strip()}
    added = []
    for ep in _entry_points():
        if (only is not None and ep.name not in only) or ep.name in _infos \
                or not wanted(ep.name):
            continue
        dist = ep.dist.name if ep.dist is not None else ep.name
        version = ep.dist.version if ep.dist is not None else "?"
        try:
            module = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break nnvm
            _infos[ep.name] = PluginInfo(ep.name, version, ep.value, False,
                                         f"failed to import {ep.value} ({dist}): {exc!r}")
            continue
        _infos[ep.name] = PluginInfo(ep.name, version, ep.value, True)
        if _add(pm, module, ep.name, f"pip uninstall {dist}"):
            added.append(ep.name)
    for name in added:
        _register_from(pm, name)


def register_plugin(module: Any, name: str) -> None:
    """Register a plugin object at run time (tests, notebooks): its hooks run immediately; a
    broken one is reported by ``plugins()``, never raised."""
    load()
    pm: pluggy.PluginManager = _state["pm"]
    if pm.get_plugin(name) is not None:
        return  # already registered (e.g. discovered through its entry point)
    _infos[name] = PluginInfo(name, getattr(module, "__version__", "0"), getattr(
        module, "__name__", name), True)
    if _add(pm, module, name, f"do not register {name}"):
        _register_from(pm, name)


def _call(pm, hook_name: str, plugin_name: str, **kwargs) -> Any:
    """``plugin_name``'s implementation of ``hook_name`` (None if it has none). Why one
    plugin at a time: plugins are activated incrementally (two-step loading), and each result
    must be credited to the ``HookImpl.plugin_name`` pluggy reports for it."""
    hook = getattr(pm.hook, hook_name)
    for impl in hook.get_hookimpls():
        if impl.plugin_name == plugin_name:
            args = {k: v for k, v in kwargs.items() if k in impl.argnames}
            if os.environ.get("NNVM_TRACE_PLUGINS"):  # direct calls bypass pluggy's tracing
                sys.stderr.write(f"[nnvm-plugins] {hook_name} -> {plugin_name}\n")
            return impl.function(**args)
    return None


#: hook -> (the records it returns, what a plugin must return)
_RECORD_HOOKS = {
    "nnvm_ops": ("ops", "OpDef, OpAttrDef or LazyOpFamily records (nnvm.op.define_op, "
                        "nnvm.op.OpAttrDef, nnvm.op.LazyOpFamily)"),
    "nnvm_passes": ("passes", "PassDef or PipelineDef records (nnvm.pass_manager.define_pass)"),
    "nnvm_targets": ("targets", "backend objects (nnvm.backend.Backend protocol)"),
    "nnvm_frontends": ("frontends", "frontend objects (nnvm.frontend.Frontend protocol)"),
}
#: deprecated hook -> the hook that replaces it
_LEGACY_HOOKS = {"nnvm_register_ops": "nnvm_ops", "nnvm_register_passes": "nnvm_passes",
                 "nnvm_register_backends": "nnvm_targets",
                 "nnvm_register_frontends": "nnvm_frontends"}


def _add(pm, module, name: str, remove_hint: str) -> bool:
    """``pm.register`` the plugin unless its hooks do not fit ``nnvm.hookspecs`` (a typo'd
    hook name, an argument no spec has): then it is reported broken, and the others load."""
    try:
        pm.register(module, name=name)
        plugin = pm.get_plugin(name)
        unknown = [hc.name for hc in pm.get_hookcallers(plugin) or () if hc.spec is None
                   and not all(i.optionalhook for i in hc.get_hookimpls())]
        if unknown:
            pm.unregister(plugin)
            known = [n for n in dir(hookspecs) if n.startswith("nnvm_")]
            close = difflib.get_close_matches(unknown[0], known, n=1)
            raise PluginError(format_error(
                f"plugin '{name}'", f"defines hook {', '.join(unknown)}, which nnvm does not "
                "have", fix=(f"Did you mean {close[0]}? " if close else "") +
                f"Rename it to one of {', '.join(known)}"))
    except (pluggy.PluginValidationError, PluginError) as exc:
        if name == "nnvm":
            raise  # core itself is broken: never hide that
        _set_broken(name, str(exc), remove_hint)
        return False
    return True


def _set_broken(name: str, why: str, remove_hint: str) -> None:
    info = _infos[name]
    info.available, info.broken = False, True
    info.reason = f"broken: {why}" + (f" (until fixed: {remove_hint})" if remove_hint else "")


def _records(pm, name: str) -> dict[str, list]:
    """Call ``name``'s registry hooks (and its deprecated ones, warning): its records by
    kind. Raises ``PluginError`` naming the hook that raised or returned a wrong item."""
    from . import op, pass_manager

    out = {kind: [] for kind, _ in _RECORD_HOOKS.values()}
    kinds = {"ops": (op.OpDef, op.OpAttrDef, op.LazyOpFamily),
             "passes": (pass_manager.PassDef, pass_manager.PipelineDef)}
    legacy = _LegacyRegistry(name)
    for hook in (*_RECORD_HOOKS, *_LEGACY_HOOKS):
        new = _LEGACY_HOOKS.get(hook)
        if new and any(i.plugin_name == name for i in getattr(pm.hook, hook).get_hookimpls()):
            warnings.warn(f"nnvm plugin '{name}' implements {hook}, deprecated since 0.4: "
                          f"return records from {new}() instead (docs/plugins.md)",
                          DeprecationWarning, stacklevel=2)
        kind, expected = _RECORD_HOOKS[new or hook]
        try:
            got = _call(pm, hook, name, registry=legacy)
        except Exception as exc:  # noqa: BLE001 - reported as the plugin's fault
            raise PluginError(format_error(f"plugin '{name}'", f"hook {hook}() raised {exc!r}",
                                           fix=f"Fix {hook} in the plugin")) from exc
        for item in got or ():
            ok = isinstance(item, kinds[kind]) if kind in kinds else \
                hasattr(item, "name") and hasattr(item, "load")
            if not ok:
                raise PluginError(format_error(f"plugin '{name}', hook {hook}()",
                                               "returned an item nnvm cannot register", expected,
                                               repr(item)[:80], fix="Return a list of those"))
            out[kind].append(item)
    out["ops"] += legacy.ops
    out["passes"] += legacy.passes
    return out


def _register_from(pm, name: str) -> None:
    """Register ``name``'s records, all or none, credited to ``name``, and record what it
    provides; a plugin whose hooks fail is reported broken and registers nothing."""
    from . import op, pass_manager

    info = _infos[name]
    try:
        records = _records(pm, name)
        op.check_records(records["ops"], name)
        pass_manager.check_records(records["passes"], name)
    except NNVMError as exc:  # PluginError, or a pass name taken
        if name == "nnvm":
            raise  # core itself is broken: never hide that
        pm.unregister(name=name)  # isolated: none of its hooks (CLI commands, info) runs
        _set_broken(name, str(exc), "")
        return
    op.register_records(records["ops"], name)
    pass_manager.register_records(records["passes"], name)
    backends, frontends = records["targets"], records["frontends"]
    for b in backends:
        _backends[b.name] = b
    for f in frontends:
        _frontends[f.name] = f
    _unprobed[name] = (backends, frontends)
    info.provides = {
        "ops": sorted(name for r in records["ops"] for name in (
            (r.name,) if isinstance(r, op.OpDef) else getattr(r, "ops", ()))),
        "passes": sorted(r.name for r in records["passes"]
                         if isinstance(r, pass_manager.PassDef)),
        "targets": [b.name for b in backends],
        "frontends": [f.name for f in frontends],
    }


class _LegacyRegistry:
    """What a deprecated ``nnvm_register_ops/passes(registry)`` hook receives: the calls it
    makes become records credited to its plugin (no registry is touched until all its hooks
    returned). Other names resolve to ``nnvm.op`` and ``nnvm.pass_manager``."""

    def __init__(self, plugin: str):
        self.plugin, self.ops, self.passes = plugin, [], []

    def register_op(self, name: str, **kw) -> None:
        from .op import define_op

        self.ops.append(define_op(name, **kw))

    def set_op_attr(self, op_name: str, key: str, value, plevel: int = 10) -> None:
        from .op import OpAttrDef

        self.ops.append(OpAttrDef(op_name, key, value, plevel))

    def add_alias(self, name: str, alias: str) -> None:
        from .op import OpDef

        for i, r in enumerate(self.ops):
            if isinstance(r, OpDef) and r.name == name:
                self.ops[i] = dataclasses.replace(r, aliases=(*r.aliases, alias))
                return
        from .op import add_alias

        add_alias(name, alias)  # an op of another plugin: the alias is global anyway

    def register_pass(self, name: str, override: bool = False, **contract):
        from .pass_manager import define_pass

        def deco(fn):
            self.passes.append(define_pass(name, fn, **contract))
            return fn

        return deco

    def register_pipeline(self, name: str, passes, plevel: int = 10) -> None:
        from .pass_manager import PipelineDef

        self.passes.append(PipelineDef(name, tuple(passes), plevel))

    def __getattr__(self, attr: str):
        from . import op, pass_manager

        return getattr(op, attr, None) or getattr(pass_manager, attr)


def _probe(pm, name: str) -> None:
    """Fill in ``name``'s summary and availability: its ``nnvm_plugin_info`` and every
    target's and frontend's ``is_available()``. Deferred to ``plugins()`` because these import
    device libraries and run toolchains, which a build for another target never needs."""
    backends, frontends = _unprobed.pop(name)
    info = _infos.get(name)
    if info is None:  # unregistered (pm.unregister, a test's teardown) before it was probed
        return
    try:
        extra = _call(pm, "nnvm_plugin_info", name) or {}
    except Exception as exc:  # noqa: BLE001
        if name == "nnvm":
            raise  # core itself is broken: never hide that
        info.available, info.reason = False, f"nnvm_plugin_info failed: {exc!r}"
        return
    info.summary = extra.get("summary", info.summary)
    if extra.get("available") is not None:
        info.available, info.reason = False, extra["available"]
    reasons = [f"{b.name}: {r}" for b in backends if (r := _safe_reason(b)) is not None]
    reasons += [f"{f.name}: {r}" for f in frontends if (r := _safe_reason(f)) is not None]
    if reasons and info.available:
        info.available = False
        info.reason = "; ".join(reasons)


def _safe_reason(obj) -> str | None:
    try:
        return obj.is_available()
    except Exception as exc:  # noqa: BLE001
        return f"availability check failed: {exc!r}"


def _entry_points():
    """The ``nnvm`` entry points, sorted by name (listed once: no plugin module is imported)."""
    if "entry_points" not in _state:
        try:
            eps = sorted(importlib.metadata.entry_points(group="nnvm"), key=lambda e: e.name)
        except Exception:  # noqa: BLE001
            eps = []
        _state["entry_points"] = eps
    return _state["entry_points"]


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        from . import __version__

        return __version__


def plugins() -> list[PluginInfo]:
    """Every discovered plugin: name, version, what it provides, availability and reason."""
    load()
    with _lock:
        for name in list(_unprobed):
            _probe(_state["pm"], name)
    return list(_infos.values())


def backends() -> dict[str, Any]:
    load()
    return dict(_backends)


def frontends() -> dict[str, Any]:
    load()
    return dict(_frontends)
