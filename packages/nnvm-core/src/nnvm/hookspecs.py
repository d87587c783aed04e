"""Every plugin hook NNVM calls, in one place. Entry-point group: ``nnvm``.

A plugin is a module (named by an entry point in group ``nnvm``) holding functions marked
``@nnvm.hookimpl`` whose names are the hooks below. Core registers its own ops, passes and
the ``reference`` backend through these same hooks (``nnvm/_builtin.py``).

Hooks are called once each, when the registries are first used, in plugin load order (core
first). None is ``firstresult`` unless its docstring says so. Implementations may accept a
subset of the arguments (pluggy), so new arguments can be added without breaking plugins.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("nnvm")
hookimpl = pluggy.HookimplMarker("nnvm")


# -- registries: called once at plugin load ----------------------------------------------------

@hookspec
def nnvm_register_ops(registry) -> None:
    """Register operators and operator attributes.

    Called when the op registry is first used. Use ``registry.register_op(...)`` for new
    ops and ``registry.set_op_attr(op, key, value, plevel)`` to add or override attributes
    of existing ones (e.g. a target's FAlterOpLayout hook, or a faster FReference kernel).

    Args:
        registry: the ``nnvm.op`` module (``register_op``, ``set_op_attr``, ``add_alias``,
            ``Param``, ``OpPattern``).

    firstresult: no.
    """


@hookspec
def nnvm_register_passes(registry) -> None:
    """Register passes and named pipelines.

    Called when the pass registry is first used. Decorate pass functions with
    ``registry.register_pass(name, requires=..., provides=..., invalidates=...,
    opt_level=...)`` (``invalidates``: the graph attributes a rewrite makes stale, e.g.
    ``registry.DERIVED``; the pass manager drops them) and set
    pipelines with ``registry.register_pipeline(name, [pass names], plevel)``; a pipeline
    registered with a higher plevel replaces a lower one (the passes package replaces core's
    ``default`` pipeline this way).

    Args:
        registry: the ``nnvm.pass_manager`` module.

    firstresult: no.
    """


@hookspec
def nnvm_register_backends() -> list:
    """Return the backends (targets) this plugin provides.

    Each backend follows the ``nnvm.backend.Backend`` protocol: ``name``, ``is_available()``
    returning None or the reason it is unavailable, ``build(...)`` and ``load(...)``.
    The plugin module must import without the backend's heavy dependency; import it inside
    ``build``/``load``.

    Returns:
        A list of backend objects.

    firstresult: no.
    """


@hookspec
def nnvm_register_frontends() -> list:
    """Return the frontends this plugin provides.

    Each frontend follows ``nnvm.frontend.Frontend``: ``name`` (used as
    ``nnvm.frontend.from_<name>``), ``extensions`` (file suffixes such as ``.onnx``),
    ``is_available()`` and ``load(model_or_path, shape=None, dtype=None) -> (graph, params)``.

    firstresult: no.
    """


@hookspec
def nnvm_add_cli_commands(subparsers) -> None:
    """Add subcommands to the ``nnvm`` command line.

    Called while ``nnvm`` builds its argument parser. Add a parser with
    ``subparsers.add_parser(name, help=...)`` and set ``func=callable(args) -> int`` with
    ``set_defaults``.

    firstresult: no.
    """


@hookspec
def nnvm_plugin_info() -> dict:
    """Describe the plugin for ``nnvm plugins``: optional keys ``available`` (None or a
    reason string) and ``summary`` (one line).

    firstresult: no.
    """
