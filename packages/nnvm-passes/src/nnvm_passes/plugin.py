"""Entry point of nnvm-passes (group `nnvm`, name `passes`): returns every pass module's records.

Each pass lives in its own module named after it (``plan_memory.py`` holds ``PlanMemory``)
and keeps its ``PassDef`` in that module's ``PASSES``; importing a module registers nothing.
``pipelines.py`` builds the opt-level pipelines from the passes found.
"""

from __future__ import annotations

import importlib
import pkgutil

from nnvm import hookimpl

_SKIP = {"plugin", "pipelines"}


def pass_modules() -> list[str]:
    """Names of the pass modules of this package (every public module but plugin/pipelines)."""
    from . import __path__ as pkg_path

    return sorted(m.name for m in pkgutil.iter_modules(pkg_path)
                  if not m.name.startswith("_") and m.name not in _SKIP)


@hookimpl
def nnvm_passes() -> list:
    from .pipelines import pipelines

    passes = [r for name in pass_modules()
              for r in importlib.import_module(f"{__package__}.{name}").PASSES]
    return passes + pipelines(passes)


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "optimisation passes and opt-level pipelines"}
