"""``nnvm.frontend``: model importers provided by plugins (``from_onnx`` comes from nnvm-onnx).

``nnvm.frontend.from_<name>(...)`` resolves to the registered frontend ``<name>``; when no
installed plugin provides it the error says which package to install.
"""

from __future__ import annotations

from typing import Any, Protocol

from .errors import BackendUnavailableError

_PACKAGES = {"onnx": "nnvm-frontend-onnx"}


class Frontend(Protocol):
    """What a frontend plugin provides (see ``hookspecs.nnvm_frontends``)."""

    name: str
    extensions: tuple[str, ...]

    def is_available(self) -> str | None: ...

    def load(self, model: Any, shape: dict | None = None, dtype: Any = None) -> tuple: ...


def get_frontend(name: str) -> Frontend:
    from . import plugin_manager as plugins

    fronts = plugins.frontends()
    if name not in fronts:
        pkg = _PACKAGES.get(name, f"a plugin providing the '{name}' frontend")
        raise BackendUnavailableError(f"frontend '{name}' is not installed: pip install {pkg} "
                                      f"(installed frontends: {', '.join(fronts) or 'none'})")
    f = fronts[name]
    reason = f.is_available()
    if reason is not None:
        raise BackendUnavailableError(f"frontend '{name}' is unavailable: {reason}")
    return f


def for_path(path: str) -> Frontend | None:
    """The frontend whose extensions match ``path`` (None if no installed frontend does)."""
    from . import plugin_manager as plugins

    for f in plugins.frontends().values():
        if any(str(path).endswith(ext) for ext in f.extensions):
            return f
    return None


def __getattr__(attr: str):
    if attr.startswith("from_"):
        name = attr[len("from_"):]

        def load(model: Any, shape: dict | None = None, dtype: Any = None, **kw: Any):
            return get_frontend(name).load(model, shape=shape, dtype=dtype, **kw)

        load.__name__ = attr
        load.__doc__ = f"Import a {name} model: returns ``(graph, params)``."
        return load
    raise AttributeError(attr)
