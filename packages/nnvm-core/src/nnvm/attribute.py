"""AttrScope: attributes applied to every symbol created inside a ``with`` block (as in NNVM)."""

from __future__ import annotations

import contextvars

from .errors import AttrError

_current: contextvars.ContextVar["AttrScope | None"] = contextvars.ContextVar(
    "nnvm_attr_scope", default=None)


class AttrScope:
    """Attach string annotations (e.g. ``ctx_group="gpu"``) to symbols made in the scope.

    Values must be strings, as in the original; nested scopes merge, the inner one winning.
    """

    def __init__(self, **attrs: str):
        for k, v in attrs.items():
            if not isinstance(v, str):
                raise AttrError(f"AttrScope: attribute '{k}' must be a string; got "
                                f"{type(v).__name__}. Write {k}={str(v)!r}")
        self._attrs = attrs
        self._token = None

    @staticmethod
    def current_attrs() -> dict[str, str]:
        scope = _current.get()
        return dict(scope._merged) if scope is not None else {}

    def get(self, attrs: dict | None) -> dict:
        """Scope attributes updated by explicitly given ones."""
        out = self.current_attrs()
        out.update(attrs or {})
        return out

    def __enter__(self) -> "AttrScope":
        outer = _current.get()
        self._merged = {**(outer._merged if outer else {}), **self._attrs}
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _current.reset(self._token)
