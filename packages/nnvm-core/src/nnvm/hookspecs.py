"""Every plugin hook NNVM calls, in one place. Entry-point group: ``nnvm``.

A plugin is a module (named by an entry point in group ``nnvm``) holding functions marked
``@nnvm.hookimpl`` whose names are the hooks below. The registry hooks *return records*
(``OpDef``/``OpAttrDef``, ``PassDef``/``PipelineDef``, backend and frontend objects); core
registers each plugin's records all or none and credits them to that plugin
(``HookImpl.plugin_name``), so a plugin never touches the registries and credit never depends
on import order. Core registers its own ops, passes and the ``reference`` backend through
these same hooks (``nnvm/_builtin.py``).

Hooks are called once per plugin, when the registries are first used, in plugin load order
(core first). None is ``firstresult``. Implementations may accept a subset of the arguments
(pluggy), so new arguments can be added without breaking plugins. A plugin whose hook raises,
returns the wrong kind of record, or defines a function named like no hook here is reported
broken by ``nnvm plugins`` (with the reason) and the others keep working.

The ``nnvm_register_*`` hooks are the 0.3 form, kept one release: a plugin implementing them
gets a ``DeprecationWarning`` naming it and the hook to use instead.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("nnvm")
hookimpl = pluggy.HookimplMarker("nnvm")


# -- registries: called once per plugin at load; each returns records -----------------------

@hookspec
def nnvm_ops() -> list:
    """Return the operators and operator attributes this plugin provides.

    ``nnvm.op.define_op(name, doc=..., shape=..., reference=..., ...)`` builds an ``OpDef``
    for a new op; ``nnvm.op.OpAttrDef(op, key, value, plevel)`` adds or overrides one
    attribute of an existing op (a target's FAlterOpLayout, a faster FReference);
    ``nnvm.op.LazyOpFamily(source, ops, aliases)`` names a module of ``OpDef`` records that
    is imported only when one of its ops is first looked up (core's families).

    Returns:
        A list of ``OpDef``, ``OpAttrDef`` and ``LazyOpFamily`` records.
    """


@hookspec
def nnvm_passes() -> list:
    """Return the passes and named pipelines this plugin provides.

    ``nnvm.pass_manager.define_pass(name, fn, requires=..., provides=..., invalidates=...,
    opt_level=...)`` builds a ``PassDef`` (``invalidates``: the graph attributes a rewrite
    makes stale, e.g. ``DERIVED``; the pass manager drops them);
    ``PipelineDef(name, passes, plevel)`` a pipeline: a higher plevel replaces a lower one (the
    passes package replaces core's ``default`` pipeline this way).

    Returns:
        A list of ``PassDef`` and ``PipelineDef`` records.
    """


@hookspec
def nnvm_targets() -> list:
    """Return the backends (targets) this plugin provides.

    Each backend follows the ``nnvm.backend.Backend`` protocol: ``name``, ``is_available()``
    returning None or the reason it is unavailable, ``build(...)`` and ``load(...)``.
    The plugin module must import without the backend's heavy dependency; import it inside
    ``build``/``load``.

    Returns:
        A list of backend objects.
    """


@hookspec
def nnvm_frontends() -> list:
    """Return the frontends this plugin provides.

    Each frontend follows ``nnvm.frontend.Frontend``: ``name`` (used as
    ``nnvm.frontend.from_<name>``), ``extensions`` (file suffixes such as ``.onnx``),
    ``is_available()`` and ``load(model_or_path, shape=None, dtype=None) -> (graph, params)``.

    Returns:
        A list of frontend objects.
    """


@hookspec
def nnvm_add_cli_commands(subparsers) -> None:
    """Add subcommands to the ``nnvm`` command line.

    Called while ``nnvm`` builds its argument parser. Add a parser with
    ``subparsers.add_parser(name, help=...)`` and set ``func=callable(args) -> int`` with
    ``set_defaults``.
    """


@hookspec
def nnvm_plugin_info() -> dict:
    """Describe the plugin for ``nnvm plugins``: optional keys ``available`` (None or a
    reason string) and ``summary`` (one line)."""


# -- deprecated (0.3): registries passed in; records are collected from the calls -----------

@hookspec
def nnvm_register_ops(registry) -> None:
    """Deprecated: return records from ``nnvm_ops`` instead.

    ``registry.register_op(...)``, ``registry.set_op_attr(op, key, value, plevel)`` and
    ``registry.add_alias(op, alias)`` become records credited to the calling plugin.
    """


@hookspec
def nnvm_register_passes(registry) -> None:
    """Deprecated: return records from ``nnvm_passes`` instead.

    ``registry.register_pass(name, ...)(fn)`` and ``registry.register_pipeline(name, passes,
    plevel)`` become records credited to the calling plugin.
    """


@hookspec
def nnvm_register_backends() -> list:
    """Deprecated: the same list, returned from ``nnvm_targets``."""


@hookspec
def nnvm_register_frontends() -> list:
    """Deprecated: the same list, returned from ``nnvm_frontends``."""
