"""Plugin discovery and loading (pluggy, entry-point group ``nnvm``).

Loading is lazy: the first lookup in a registry loads core's built-in plugin and then every
entry point. A plugin that fails to import is recorded as unavailable with the reason, never
raised at discovery. Availability (device probes, toolchains: pyopencl, CuPy, nvcc) is asked
for only when ``plugins()`` reports it, so building for ``reference`` probes no hardware. ``NNVM_DISABLE_PLUGIN_AUTOLOAD=1`` loads only core (plus the names in
``NNVM_PLUGINS``, comma-separated); ``NNVM_TRACE_PLUGINS=1`` prints every hook call.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import sys
import threading
from typing import Any

import pluggy

from . import hookspecs
from .errors import PluginError

_lock = threading.RLock()
_state: dict[str, Any] = {"loaded": False, "loading": False}


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
    if _state["loaded"] or _state["loading"]:
        return
    with _lock:
        if _state["loaded"] or _state["loading"]:
            return
        _state["loading"] = True
        try:
            _load()
            _state["loaded"] = True
        finally:
            _state["loading"] = False


def _load() -> None:
    from . import _builtin, op, pass_manager

    pm = pluggy.PluginManager("nnvm")
    pm.add_hookspecs(hookspecs)
    if os.environ.get("NNVM_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda msg: sys.stderr.write(f"[nnvm-plugins] {msg}"))
        pm.enable_tracing()
    _state["pm"] = pm
    pm.register(_builtin, name="nnvm")
    _infos["nnvm"] = PluginInfo("nnvm", _version("nnvm-core"), "nnvm._builtin", True,
                                summary="core: IR, standard ops, InferShape/InferType, "
                                        "reference target")
    only = None
    if os.environ.get("NNVM_DISABLE_PLUGIN_AUTOLOAD"):
        only = {s.strip() for s in os.environ.get("NNVM_PLUGINS", "").split(",") if s.strip()}
    for ep in _entry_points():
        if only is not None and ep.name not in only:
            continue
        if ep.name in _infos:
            continue
        dist = ep.dist.name if ep.dist is not None else ep.name
        version = ep.dist.version if ep.dist is not None else "?"
        try:
            module = ep.load()
            pm.register(module, name=ep.name)
            _infos[ep.name] = PluginInfo(ep.name, version, ep.value, True)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break nnvm
            _infos[ep.name] = PluginInfo(ep.name, version, ep.value, False,
                                         f"failed to import {ep.value} ({dist}): {exc!r}")
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin hook name not in nnvm.hookspecs: {exc}") from exc
    for name in [n for n, _ in pm.list_name_plugin()]:
        _register_from(pm, name, op, pass_manager)
    op.set_provider("user")


def register_plugin(module: Any, name: str) -> None:
    """Register a plugin object at run time (tests, notebooks): its hooks run immediately."""
    from . import op, pass_manager

    load()
    pm: pluggy.PluginManager = _state["pm"]
    if pm.get_plugin(name) is not None:
        return  # already registered (e.g. discovered through its entry point)
    pm.register(module, name=name)
    _infos[name] = PluginInfo(name, getattr(module, "__version__", "0"), getattr(
        module, "__name__", name), True)
    _register_from(pm, name, op, pass_manager)
    op.set_provider("user")


def _call(pm, hook_name: str, plugin_name: str, **kwargs) -> Any:
    hook = getattr(pm.hook, hook_name)
    for impl in hook.get_hookimpls():
        if impl.plugin_name == plugin_name:
            args = {k: v for k, v in kwargs.items() if k in impl.argnames}
            if os.environ.get("NNVM_TRACE_PLUGINS"):  # direct calls bypass pluggy's tracing
                sys.stderr.write(f"[nnvm-plugins] {hook_name} -> {plugin_name}\n")
            return impl.function(**args)
    return None


def _register_from(pm, name: str, op, pass_manager) -> None:
    info = _infos[name]
    before_ops = set(op._OPS)
    before_passes = set(pass_manager._PASSES)
    op.set_provider(name)
    try:
        _call(pm, "nnvm_register_ops", name, registry=op)
        _call(pm, "nnvm_register_passes", name, registry=pass_manager)
        backends = _call(pm, "nnvm_register_backends", name) or []
        frontends = _call(pm, "nnvm_register_frontends", name) or []
    except Exception as exc:  # noqa: BLE001
        if name == "nnvm":
            raise  # core itself is broken: never hide that
        info.available = False
        info.reason = f"registration failed: {exc!r}"
        return
    for b in backends:
        _backends[b.name] = b
    for f in frontends:
        _frontends[f.name] = f
    _unprobed[name] = (backends, frontends)
    info.provides = {
        "ops": sorted(set(op._OPS) - before_ops),
        "passes": sorted(set(pass_manager._PASSES) - before_passes),
        "targets": [b.name for b in backends],
        "frontends": [f.name for f in frontends],
    }


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
    try:
        return sorted(importlib.metadata.entry_points(group="nnvm"), key=lambda e: e.name)
    except Exception:  # noqa: BLE001
        return []


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
