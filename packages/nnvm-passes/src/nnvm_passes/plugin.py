"""Entry point of nnvm-passes (group `nnvm`, name `passes`): registers every pass module.

Each pass lives in its own module named after it (``plan_memory.py`` holds ``PlanMemory``);
importing the module registers the pass. ``pipelines.py`` sets the opt-level pipelines.
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
def nnvm_register_passes(registry) -> None:
    for name in pass_modules():
        importlib.import_module(f"{__package__}.{name}")
    try:
        pipelines = importlib.import_module(f"{__package__}.pipelines")
    except ModuleNotFoundError:
        return
    pipelines.register(registry)


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "optimisation passes and opt-level pipelines"}
