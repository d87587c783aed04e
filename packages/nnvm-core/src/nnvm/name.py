"""Automatic node names: NameManager gives ``<hint><counter>``; Prefix prepends a string."""

from __future__ import annotations

import contextvars

_current: contextvars.ContextVar["NameManager | None"] = contextvars.ContextVar(
    "nnvm_name_manager", default=None)


class NameManager:
    """Hands out names for nodes created without ``name=``: ``dense0``, ``dense1``, ..."""

    def __init__(self):
        self._counter: dict[str, int] = {}
        self._token = None

    def get(self, name: str | None, hint: str) -> str:
        if name:
            return name
        hint = hint.strip("_").lower() or "node"
        n = self._counter.get(hint, 0)
        self._counter[hint] = n + 1
        return f"{hint}{n}"

    @staticmethod
    def current() -> "NameManager":
        mgr = _current.get()
        if mgr is None:
            mgr = NameManager()
            _current.set(mgr)
        return mgr

    def __enter__(self) -> "NameManager":
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _current.reset(self._token)


class Prefix(NameManager):
    """Prefix every name made in the scope, explicit or automatic (``Prefix("block1_")``)."""

    def __init__(self, prefix: str):
        super().__init__()
        self._prefix = prefix

    def get(self, name: str | None, hint: str) -> str:
        return self._prefix + super().get(name, hint)
