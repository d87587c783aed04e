"""Targets and the Backend protocol that every code generator implements.

``Backend`` is a Protocol, not a base class: a third-party backend need not import anything
from us to be one, and ``plugin.py`` can describe it without importing its heavy dependency.
"""

from __future__ import annotations

import dataclasses
import difflib
import shlex
from typing import Any, Protocol, runtime_checkable

from .errors import BackendUnavailableError, NNVMError, format_error

#: Well-known targets and the package that adds each, so that asking for a target whose
#: plugin is not installed names what to install (core never imports a plugin, so it cannot
#: ask the plugin itself).
TARGET_PACKAGES = {
    "llvm": "nnvm-backend-llvm[compiler]",
    "opencl": "nnvm-backend-opencl[intel]",
    "cuda": "nnvm-backend-cuda[cuda12]",
}


@runtime_checkable
class Backend(Protocol):
    """What a target plugin provides.

    Attributes:
        name: the target kind (``"llvm"``), first word of a target string.
        description: one line for ``nnvm plugins``.
        priority: preference when choosing the best available target (higher wins).
        options: valid ``-key=value`` target options, with one-line descriptions.
    """

    name: str
    description: str
    priority: int
    options: dict[str, str]

    def is_available(self) -> str | None:
        """None when usable here (artifacts load and run), otherwise the reason and the
        command that fixes it. A backend that can run but not compile here may add an
        optional ``compiler_available() -> str | None`` (see ``build_reason``), and one
        that can validate option values an optional ``check_target(target)`` (see
        ``check_target``)."""

    def build(self, graph, params: dict, target: "Target", config: "BuildConfig") -> Any:
        """Lower an optimised, shape-inferred graph to a runtime module."""

    def load(self, artifact) -> Any:
        """Create a runtime module from a verified ``nnvm.runtime.artifact.Artifact``."""


@dataclasses.dataclass(frozen=True)
class Target:
    """A parsed target string such as ``llvm -mcpu=native -num-threads=2``."""

    kind: str
    options: tuple[tuple[str, str], ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

    def __str__(self) -> str:
        return " ".join([self.kind] + [f"-{k}={v}" if v != "" else f"-{k}"
                                       for k, v in self.options])


@dataclasses.dataclass
class BuildConfig:
    """Options of one build: opt level and explicit pass switches (NNVM's build_config)."""

    opt_level: int = 2
    add_pass: tuple[str, ...] = ()
    disabled_pass: tuple[str, ...] = ()
    extra: dict = dataclasses.field(default_factory=dict)


def parse_target(target: "str | Target | None") -> Target:
    """Parse and validate a target string against the registered backends.

    Raises:
        BackendUnavailableError: unknown kind (lists the targets) or unavailable backend.
        NNVMError: an option the backend does not know (lists the valid ones).
    """
    from . import plugin_manager as plugins

    if isinstance(target, Target):
        return target
    if target is None:
        return Target(best_target())
    if isinstance(target, dict):
        kind = str(target.get("kind", ""))
        opts = tuple((str(k), str(v)) for k, v in target.items() if k != "kind")
    else:
        try:
            words = shlex.split(str(target))
        except ValueError as exc:
            raise NNVMError(f"target {target!r}: cannot be parsed ({exc})") from None
        if not words:
            raise NNVMError("target: empty string; valid targets: "
                            + ", ".join(sorted(plugins.backends())))
        kind, opts = words[0], []
        for w in words[1:]:
            if not w.startswith("-"):
                raise NNVMError(format_error(f"target {target!r}", f"option {w!r} must look "
                                             "like -key=value"))
            k, _, v = w.lstrip("-").partition("=")
            opts.append((k, v))
        opts = tuple(opts)
    backend = plugins.find_backend(kind)
    if backend is None:
        raise BackendUnavailableError(_unknown_target(str(target), kind, plugins.backends()))
    valid = backend.options
    for k, _ in opts:
        if k not in valid:
            close = difflib.get_close_matches(k, list(valid), n=1)
            hint = f"Did you mean '-{close[0]}'? " if close else ""
            raise NNVMError(format_error(
                f"target {str(target)!r}", f"unknown option '-{k}'",
                fix=hint + "Valid options: " + (
                    ", ".join(f"-{o} ({d})" for o, d in valid.items()) or "none")))
    return Target(kind, opts)


def get_backend(kind: str, require_available: bool = True):
    from . import plugin_manager as plugins

    b = plugins.find_backend(kind)
    if b is None:
        raise BackendUnavailableError(_unknown_target(kind, kind, plugins.backends()))
    if require_available:
        reason = b.is_available()
        if reason is not None:
            raise BackendUnavailableError(f"target '{kind}' is unavailable here: {reason}")
    return b


def _unknown_target(where: str, kind: str, backends: dict) -> str:
    """The message for a target kind no installed plugin provides: the package that adds a
    well-known one, else the closest installed or well-known name, and the targets here."""
    if kind in TARGET_PACKAGES:
        return format_error(f"target {where!r}", f"unknown target '{kind}': its plugin is not "
                            "installed", fix=f"pip install {TARGET_PACKAGES[kind]} adds it. "
                            f"Available targets: {describe_targets()}")
    close = difflib.get_close_matches(kind, sorted({*backends, *TARGET_PACKAGES}), n=1)
    hint = f"Did you mean '{close[0]}'? " if close else ""
    return format_error(f"target {where!r}", f"unknown target '{kind}'",
                        fix=f"{hint}Available targets: {describe_targets()}")


def check_target(backend, target: Target) -> None:
    """Let ``backend`` validate option *values* (``-mcpu=foo``) before anything compiles.

    ``parse_target`` checks option names only, because it runs where loading an artifact
    must stay cheap; a backend that can check values (llvm asks LLVM for its CPU names)
    provides an optional ``check_target(target)`` that raises ``NNVMError``, and
    ``nnvm.compiler.build`` calls it first, so a bad value fails in a second instead of
    after the graph passes, or worse, being logged by the code generator and ignored.
    """
    check = getattr(backend, "check_target", None)
    if check is not None:
        check(target)


def describe_targets() -> str:
    from . import plugin_manager as plugins

    parts = []
    for name, b in sorted(plugins.backends().items()):
        reason = b.is_available()
        parts.append(name if reason is None else f"{name} (unavailable: {reason})")
    return ", ".join(parts)


def best_target() -> str:
    """The available target with the highest priority (``reference`` always qualifies)."""
    from . import plugin_manager as plugins

    ok = [b for b in plugins.backends().values()
          if b.is_available() is None and build_reason(b) is None]
    return max(ok, key=lambda b: b.priority).name


def build_reason(backend) -> str | None:
    """Why ``backend`` cannot *compile* here (None if it can).

    A backend whose runtime needs less than its compiler (llvm: loading needs only
    apache-tvm-ffi, building needs apache-tvm) reports its compiler separately through an
    optional ``compiler_available()`` method; otherwise ``is_available()`` covers both.
    """
    f = getattr(backend, "compiler_available", None)
    return f() if f is not None else backend.is_available()
