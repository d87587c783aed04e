"""Pass registry, named pipelines and the pass manager that holds passes to their contracts.

A pass is a pure function ``Graph -> Graph``. It declares the graph attributes it requires,
provides and invalidates (NNVM's ``depend_graph_attr`` / ``provide_graph_attr``; the kinds of
attributes are in ``nnvm.graph_attrs``). ``apply_passes`` checks the whole sequence before
running anything, then, while running: drops what each pass invalidates, and before each pass
checks its requirements against the graph's real attributes, re-running an analysis pass
(InferShape, InferType) that provides a missing one or raising ``PassDependencyError`` naming
the attribute and the pass that provides it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
import time
from typing import Callable, Sequence

from . import graph_attrs
from .errors import NNVMError, PassDependencyError, PassError, format_error
from .graph_attrs import DERIVED
from .ir import Graph


@dataclasses.dataclass(frozen=True)
class PassDef:
    """A pass as a plugin's ``nnvm_passes`` hook returns it, and as the registry holds it.

    Attributes:
        name: CamelCase name, as in NNVM (``InferShape``); its file is the snake_case form.
        fn: the pure function ``Graph -> Graph``.
        requires: graph attributes that must be present and current when it runs.
        provides: graph attributes it sets.
        invalidates: graph attributes its result makes stale, which the pass manager drops;
            ``DERIVED`` stands for every attribute derived from the nodes (a rewrite).
        opt_level: lowest ``opt_level`` at which ``build`` runs it (None: only on request).
        doc: one paragraph for ``docs/passes.md`` and ``nnvm inspect``.
        provider: the plugin whose hook returned it (filled in by the registry).
        analysis: it only adds attributes and may be re-run whenever one of them is missing.
    """

    name: str
    fn: Callable[[Graph], Graph]
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    invalidates: tuple[str, ...] = ()
    opt_level: int | None = None
    doc: str = ""
    provider: str = ""
    analysis: bool = False

    def invalidated(self, nodes_changed: bool = True) -> set[str]:
        """Attribute names to drop after it ran (``DERIVED`` counts only if nodes changed)."""
        out = {a for a in self.invalidates if a != DERIVED}
        if DERIVED in self.invalidates and nodes_changed:
            out |= graph_attrs.derived()
        return out - set(self.provides)


@dataclasses.dataclass(frozen=True)
class PipelineDef:
    """A named pass sequence returned from ``nnvm_passes``; a higher ``plevel`` replaces a
    lower one (the passes package replaces core's plevel-0 ``default`` this way)."""

    name: str
    passes: tuple[str, ...]
    plevel: int = 10


_PASSES: dict[str, PassDef] = {}
_PIPELINES: dict[str, tuple[list[str], int, str]] = {}


def define_pass(name: str, fn: Callable[[Graph], Graph], *, requires: Sequence[str] = (),
                provides: Sequence[str] = (), invalidates: str | Sequence[str] = (),
                analysis: bool = False, change_graph: bool = False,
                opt_level: int | None = None) -> PassDef:
    """A ``PassDef`` for ``fn(graph) -> graph`` (registers nothing).

    ``change_graph=True`` (the older declaration, kept for third-party passes) means
    ``invalidates=DERIVED``: every per-entry and per-node attribute becomes stale.

    Raises:
        PassError: an analysis that declares invalidated attributes.
    """
    inval = (invalidates,) if isinstance(invalidates, str) else tuple(invalidates)
    if change_graph and DERIVED not in inval:
        inval += (DERIVED,)
    if analysis and inval:
        raise PassError(format_error(
            f"pass '{name}'", "is an analysis that invalidates", "no invalidates", inval,
            fix="Declare analysis=False for a rewriting pass"))
    return PassDef(name, fn, tuple(requires), tuple(provides), inval, opt_level,
                   (fn.__doc__ or "").strip(), "", analysis)


class PassSet:
    """A pass module's records: ``PASSES = PassSet()``, then ``@PASSES.define(name, ...)`` on
    each pass function (the function is returned unchanged) and ``PASSES.pipeline(...)``;
    the plugin's ``nnvm_passes`` hook returns them. Importing the module registers nothing."""

    def __init__(self):
        self.records: list[PassDef | PipelineDef] = []

    def define(self, name: str, **contract) -> Callable:
        """Decorator: ``define_pass(name, fn, **contract)`` appended to this set."""
        def deco(fn: Callable[[Graph], Graph]) -> Callable[[Graph], Graph]:
            self.records.append(define_pass(name, fn, **contract))
            return fn

        return deco

    def pipeline(self, name: str, passes: Sequence[str], plevel: int = 10) -> None:
        self.records.append(PipelineDef(name, tuple(passes), plevel))

    def __iter__(self):
        return iter(self.records)


def register_records(records: Sequence[PassDef | PipelineDef], provider: str,
                     override: bool = False) -> None:
    """Add passes and pipelines credited to ``provider``, all or none.

    Raises:
        NNVMError: a pass name is taken (and ``override`` is False).
    """
    check_records(records, provider, override)
    for r in records:
        if isinstance(r, PassDef):
            _PASSES[r.name] = dataclasses.replace(r, provider=provider)
        elif r.name not in _PIPELINES or r.plevel > _PIPELINES[r.name][1]:
            _PIPELINES[r.name] = (list(r.passes), r.plevel, provider)


def check_records(records: Sequence[PassDef | PipelineDef], provider: str,
                  override: bool = False) -> None:
    """Raise ``NNVMError`` for the first record ``register_records`` would refuse."""
    owner = {n: p.provider for n, p in _PASSES.items()}
    for r in records:
        if isinstance(r, PassDef):
            if r.name in owner and not override:
                raise NNVMError(format_error(f"pass '{r.name}' from {provider}",
                                             f"already registered by {owner[r.name]}",
                                             fix="Pick another name, or pass override=True "
                                                 "to register_pass to replace it on purpose"))
            owner[r.name] = provider


def register_pass(name: str, *, provider: str = "user", override: bool = False,
                  **contract) -> Callable:
    """Decorator registering ``fn(graph) -> graph`` as pass ``name`` now, credited to
    ``provider`` (tests, notebooks; a plugin returns ``PassDef`` records from ``nnvm_passes``).
    ``contract``: the keywords of ``define_pass``."""
    def deco(fn: Callable[[Graph], Graph]) -> Callable[[Graph], Graph]:
        register_records([define_pass(name, fn, **contract)], provider, override)
        return fn

    return deco


def register_pipeline(name: str, passes: Sequence[str], plevel: int = 10,
                      provider: str = "user") -> None:
    """Register a named pass sequence now; a higher ``plevel`` replaces a lower one."""
    register_records([PipelineDef(name, tuple(passes), plevel)], provider)


def get_pass(name: str) -> PassDef:
    """The pass ``name``, looked up among the active plugins first (then all of them)."""
    from . import plugin_manager

    if plugin_manager.find(lambda: _PASSES.get(name)) is None:
        close = difflib.get_close_matches(name, list(_PASSES), n=5)
        raise PassError(format_error(
            f"pass '{name}'", "is not registered",
            fix=(f"Did you mean: {', '.join(close)}? " if close else "") +
            f"Registered passes: {', '.join(sorted(_PASSES))}"))
    return _PASSES[name]


def list_passes() -> dict[str, PassDef]:
    _ensure_plugins()
    return dict(sorted(_PASSES.items()))


def get_pipeline(name: str) -> list[str]:
    """The passes of pipeline ``name``, each checked to exist: a pipeline is registered before
    the passes it names may be (they can come from another plugin), so a typo or an
    uninstalled plugin shows here, naming the pipeline's provider, not as a bare pass error
    halfway through a build."""
    _ensure_plugins()
    if name not in _PIPELINES:
        raise PassError(format_error(f"pipeline '{name}'", "is not registered",
                                     fix=f"Registered pipelines: {', '.join(sorted(_PIPELINES))}"))
    passes, _, provider = _PIPELINES[name]
    missing = [p for p in passes if p not in _PASSES]
    if missing:
        raise PassError(format_error(
            f"pipeline '{name}' from {provider}", "names passes that are not registered",
            "registered passes", missing,
            fix="Install the plugin that provides them (`nnvm plugins` lists what is "
                f"installed) or fix the pipeline's names; registered: {', '.join(sorted(_PASSES))}"))
    return list(passes)


def list_pipelines() -> dict[str, list[str]]:
    _ensure_plugins()
    return {k: list(v[0]) for k, v in sorted(_PIPELINES.items())}


def opt_level_passes(opt_level: int, enabled: Sequence[str] = (),
                     disabled: Sequence[str] = ()) -> list[str]:
    """The ``default`` pipeline filtered by ``opt_level`` and by explicit switches.

    A pass runs when its ``opt_level`` is at most ``opt_level`` or it is named in ``enabled``,
    and it is not named in ``disabled``. An enabled pass the pipeline does not list (a
    plugin's) runs after the pipeline's last graph rewrite, so the analyses that close the
    pipeline (shapes, types, fusion, memory plan) describe its result.
    """
    for n in (*enabled, *disabled):
        get_pass(n)  # unknown names are an error, with suggestions
    out = []
    for n in get_pipeline("default"):
        info = get_pass(n)
        level_ok = info.opt_level is not None and info.opt_level <= opt_level
        if (level_ok or n in enabled) and n not in disabled:
            out.append(n)
    extra = [n for n in dict.fromkeys(enabled) if n not in out and n not in disabled]
    at = max((i + 1 for i, n in enumerate(out) if get_pass(n).invalidates), default=0)
    return out[:at] + extra + out[at:]


def check_dependencies(graph: Graph, names: Sequence[str]) -> None:
    """Raise before running anything if a pass's required attribute will be missing.

    Simulates the sequence on the attribute names: a pass's invalidated attributes are gone
    after it (assuming it does change the nodes), a missing one an analysis provides counts as
    re-run, any other missing one is an error.
    """
    have, stale = _attr_state(graph)
    dropped_by: dict[str, str] = {}
    for n in names:
        info = get_pass(n)
        for analysis in _analyses_needed(info, have, stale, dropped_by):
            have.update(analysis.provides)
        gone = info.invalidated()
        dropped_by.update((a, n) for a in gone & (have | stale))
        have = (have - gone) | set(info.provides)
        stale -= gone | have


def apply_passes(graph: Graph, passes: str | Sequence[str], dump_ir: str | bool | None = None,
                 log: Callable[[str], None] | None = None) -> Graph:
    """Run passes in order, holding each to its declared contract.

    Args:
        graph: the input graph (not modified).
        passes: one name or a sequence of names.
        dump_ir: print the IR after each pass (True: to stderr; a directory: one file per pass);
            defaults to the ``NNVM_DUMP_IR`` environment variable.
        log: called with one line per pass (name and milliseconds), for progress displays.
    """
    names = [passes] if isinstance(passes, str) else list(passes)
    check_dependencies(graph, names)
    run = _Run(os.environ.get("NNVM_DUMP_IR") if dump_ir is None else dump_ir, log)
    for n in names:
        info = get_pass(n)
        have, stale = _attr_state(graph)
        for analysis in _analyses_needed(info, have, stale, run.dropped_by):
            graph = run.step(graph, analysis, f" (re-run for {n})")
        graph = run.step(graph, info)
    return graph


class _Run:
    """One ``apply_passes`` call: runs a pass, drops what it invalidates, logs and dumps."""

    def __init__(self, dump_ir: str | bool | None, log: Callable[[str], None] | None):
        self.dump_ir, self.log = dump_ir, log
        self.ran: list[str] = []
        self.dropped_by: dict[str, str] = {}

    def step(self, graph: Graph, info: PassDef, note: str = "") -> Graph:
        n = info.name
        t0 = time.perf_counter()
        try:
            out = info.fn(graph)
        except NNVMError as exc:
            exc.args = (f"{exc.args[0] if exc.args else exc} [in pass '{n}'"
                        + (f", after {', '.join(self.ran)}]" if self.ran else "]"),
                        ) + exc.args[1:]
            raise
        if not isinstance(out, Graph):
            raise PassError(f"pass '{n}' ({info.provider}) returned {type(out).__name__}, "
                            f"expected a Graph. Plugin author: a pass must return a Graph")
        same = len(out.outputs) == len(graph.outputs) and all(
            a.node is b.node and a.index == b.index for a, b in zip(out.outputs, graph.outputs))
        # A value the pass set itself is current; one it passed through unchanged is stale.
        # Whether the pass dropped it or we do, a later requirement may re-run its analysis.
        stale = {k for k in info.invalidated(nodes_changed=not same)
                 if k in graph.attrs and out.attrs.get(k, graph.attrs[k]) is graph.attrs[k]}
        self.dropped_by.update(dict.fromkeys(stale, n))
        if stale & set(out.attrs):
            out = out.with_attrs()
            for key in stale & set(out.attrs):
                del out.attrs[key]
        self.ran.append(n)
        if self.log is not None:
            self.log(f"{n}{note}: {(time.perf_counter() - t0) * 1e3:.1f} ms")
        if self.dump_ir:
            text = f"// after {n}{note}\n{out.ir()}\n"
            if self.dump_ir is True or self.dump_ir in ("1", "-"):
                sys.stderr.write(text)
            else:
                os.makedirs(self.dump_ir, exist_ok=True)
                path = os.path.join(self.dump_ir, f"{len(self.ran) - 1:02d}_{n}.txt")
                with open(path, "w") as f:
                    f.write(text)
        return out


def _attr_state(graph: Graph) -> tuple[set[str], set[str]]:
    """(current attribute names, stale ones): a per-entry or per-node list whose length no
    longer fits the nodes is stale (left behind by a rewrite that did not declare
    ``invalidates``, or passed in by hand)."""
    have, stale = set(), set()
    for key, value in graph.attrs.items():
        if graph_attrs.get(key).kind != graph_attrs.GRAPH:
            idx = graph.index
            if graph_attrs.is_stale(key, value, idx.num_node_entries, idx.num_nodes):
                stale.add(key)
                continue
        have.add(key)
    return have, stale


def _analyses_needed(info: PassDef, have: set[str], stale: set[str],
                     dropped_by: dict[str, str], _seen: tuple[str, ...] = ()
                     ) -> list[PassDef]:
    """Analyses to re-run, in order, so that every attribute ``info`` requires is in
    ``have``. Only an attribute an earlier pass of the sequence invalidated is re-computed
    (its analysis ran before, on inputs the caller chose). Raises ``PassDependencyError``
    for any other missing one, and for a stale one: it was never dropped, so something broke
    a contract and computing it over the caller's value would hide that."""
    todo: list[PassDef] = []
    for attr in info.requires:
        if attr in have or any(attr in a.provides for a in todo):
            continue
        by = [p for p in _PASSES.values() if attr in p.provides]
        analysis = next((p for p in by if p.analysis and p.name not in _seen), None)
        if analysis is None or attr in stale or attr not in dropped_by:
            raise _missing(info.name, attr, by, dropped_by.get(attr), attr in stale)
        todo += _analyses_needed(analysis, have, stale, dropped_by, (*_seen, info.name))
        todo.append(analysis)
    return todo


def _missing(name: str, attr: str, by: list[PassDef], dropped_by: str | None,
             stale: bool) -> PassDependencyError:
    if stale:
        what = (f"requires graph attribute '{attr}', which is stale (its length does not fit "
                f"the graph's nodes)")
    elif dropped_by:
        what = f"requires graph attribute '{attr}', which pass '{dropped_by}' invalidated"
    else:
        what = f"requires graph attribute '{attr}', which is not present"
    when = f"after '{dropped_by}'" if dropped_by else "after the last pass that changed " \
        "the graph" if stale else "first"
    fix = (f"It is provided by pass {' or '.join(repr(p.name) for p in by)}; run that {when}"
           if by else "Set it on the graph before applying the pass")
    return PassDependencyError(format_error(f"pass '{name}'", what, fix=fix))


def _ensure_plugins() -> None:
    from . import plugin_manager as plugins

    plugins.load()
