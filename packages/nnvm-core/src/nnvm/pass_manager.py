"""Pass registry, named pipelines and the pass manager that checks dependencies before running.

A pass is a pure function ``Graph -> Graph``. It declares the graph attributes it requires and
provides (NNVM's ``depend_graph_attr`` / ``provide_graph_attr``); ``apply_passes`` checks the
whole sequence *before* running anything and names the pass that would provide a missing one.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
import time
from typing import Callable, Sequence

from .errors import NNVMError, PassDependencyError, PassError, format_error
from .ir import Graph


@dataclasses.dataclass(frozen=True)
class PassInfo:
    """A registered pass.

    Attributes:
        name: CamelCase name, as in NNVM (``InferShape``); its file is the snake_case form.
        fn: the pure function ``Graph -> Graph``.
        requires: graph attributes that must be present (or provided by an earlier pass).
        provides: graph attributes it sets.
        change_graph: whether it rewrites nodes (per-entry attributes become stale).
        opt_level: lowest ``opt_level`` at which ``build`` runs it (None: only on request).
        doc: one paragraph for ``docs/passes.md`` and ``nnvm inspect``.
        provider: the plugin that registered it.
    """

    name: str
    fn: Callable[[Graph], Graph]
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    change_graph: bool = False
    opt_level: int | None = None
    doc: str = ""
    provider: str = "nnvm"


_PASSES: dict[str, PassInfo] = {}
_PIPELINES: dict[str, tuple[list[str], int, str]] = {}


def register_pass(name: str, *, requires: Sequence[str] = (), provides: Sequence[str] = (),
                  change_graph: bool = False, opt_level: int | None = None,
                  override: bool = False) -> Callable:
    """Decorator registering ``fn(graph) -> graph`` as pass ``name``."""
    from .op import _current_provider

    def deco(fn: Callable[[Graph], Graph]) -> Callable[[Graph], Graph]:
        provider = _current_provider[0]
        if name in _PASSES and not override:
            raise NNVMError(format_error(f"register_pass('{name}') from {provider}",
                                         f"already registered by {_PASSES[name].provider}",
                                         fix="Pass override=True to replace it on purpose"))
        _PASSES[name] = PassInfo(name, fn, tuple(requires), tuple(provides), change_graph,
                                 opt_level, (fn.__doc__ or "").strip(), provider)
        return fn

    return deco


def register_pipeline(name: str, passes: Sequence[str], plevel: int = 10) -> None:
    """Register a named pass sequence; a higher ``plevel`` replaces a lower one."""
    from .op import _current_provider

    old = _PIPELINES.get(name)
    if old is None or plevel > old[1]:
        _PIPELINES[name] = (list(passes), plevel, _current_provider[0])


def get_pass(name: str) -> PassInfo:
    _ensure_plugins()
    if name not in _PASSES:
        close = difflib.get_close_matches(name, list(_PASSES), n=5)
        raise PassError(format_error(
            f"pass '{name}'", "is not registered",
            fix=(f"Did you mean: {', '.join(close)}? " if close else "") +
            f"Registered passes: {', '.join(sorted(_PASSES))}"))
    return _PASSES[name]


def list_passes() -> dict[str, PassInfo]:
    _ensure_plugins()
    return dict(sorted(_PASSES.items()))


def get_pipeline(name: str) -> list[str]:
    _ensure_plugins()
    if name not in _PIPELINES:
        raise PassError(f"pipeline '{name}' is not registered; registered pipelines: "
                        f"{', '.join(sorted(_PIPELINES))}")
    return list(_PIPELINES[name][0])


def list_pipelines() -> dict[str, list[str]]:
    _ensure_plugins()
    return {k: list(v[0]) for k, v in sorted(_PIPELINES.items())}


def opt_level_passes(opt_level: int, enabled: Sequence[str] = (),
                     disabled: Sequence[str] = ()) -> list[str]:
    """The ``default`` pipeline filtered by ``opt_level`` and by explicit switches.

    A pass runs when its ``opt_level`` is at most ``opt_level`` or it is named in ``enabled``,
    and it is not named in ``disabled``.
    """
    for n in (*enabled, *disabled):
        get_pass(n)  # unknown names are an error, with suggestions
    out = []
    for n in get_pipeline("default"):
        info = get_pass(n)
        level_ok = info.opt_level is not None and info.opt_level <= opt_level
        if (level_ok or n in enabled) and n not in disabled:
            out.append(n)
    return out


def check_dependencies(graph: Graph, names: Sequence[str]) -> None:
    """Raise before running anything if a pass's required attribute will be missing."""
    have = set(graph.attrs)
    providers: dict[str, list[str]] = {}
    for info in _PASSES.values():
        for attr in info.provides:
            providers.setdefault(attr, []).append(info.name)
    for n in names:
        info = get_pass(n)
        for attr in info.requires:
            if attr not in have:
                by = providers.get(attr)
                fix = (f"It is provided by pass {' or '.join(repr(p) for p in by)}; run that "
                       f"first" if by else "Set it on the graph before applying the pass")
                raise PassDependencyError(format_error(
                    f"pass '{n}'", f"requires graph attribute '{attr}', which is not present",
                    fix=fix))
        have.update(info.provides)


def apply_passes(graph: Graph, passes: str | Sequence[str], dump_ir: str | bool | None = None,
                 log: Callable[[str], None] | None = None) -> Graph:
    """Run passes in order after checking their declared dependencies.

    Args:
        graph: the input graph (not modified).
        passes: one name or a sequence of names.
        dump_ir: print the IR after each pass (True: to stderr; a directory: one file per pass);
            defaults to the ``NNVM_DUMP_IR`` environment variable.
        log: called with one line per pass (name and milliseconds), for progress displays.
    """
    names = [passes] if isinstance(passes, str) else list(passes)
    check_dependencies(graph, names)
    dump_ir = os.environ.get("NNVM_DUMP_IR") if dump_ir is None else dump_ir
    ran: list[str] = []
    for step, n in enumerate(names):
        info = get_pass(n)
        t0 = time.perf_counter()
        try:
            out = info.fn(graph)
        except NNVMError as exc:
            exc.args = (f"{exc.args[0] if exc.args else exc} [in pass '{n}'"
                        + (f", after {', '.join(ran)}]" if ran else "]"),) + exc.args[1:]
            raise
        if not isinstance(out, Graph):
            raise PassError(f"pass '{n}' ({info.provider}) returned {type(out).__name__}, "
                            f"expected a Graph. Plugin author: a pass must return a Graph")
        graph = out
        ran.append(n)
        if log is not None:
            log(f"{n}: {(time.perf_counter() - t0) * 1e3:.1f} ms")
        if dump_ir:
            text = f"// after {n}\n{graph.ir()}\n"
            if dump_ir is True or dump_ir in ("1", "-"):
                sys.stderr.write(text)
            else:
                os.makedirs(dump_ir, exist_ok=True)
                with open(os.path.join(dump_ir, f"{step:02d}_{n}.txt"), "w") as f:
                    f.write(text)
    return graph


def _ensure_plugins() -> None:
    from . import plugin_manager as plugins

    plugins.load()
