"""Where every NNVM package keeps its disk caches, and the one switch that turns them all off.

Why one rule: ``NNVM_CACHE_DIR`` is read by the core (``InferenceSession``'s compiled
artifacts), the llvm backend (kernel libraries), the OpenCL backend (program binaries, probe
verdicts, the ICD folder, PoCL's kernel cache) and the CUDA backend (PTX). Each used to read
the variable itself, and only the llvm backend knew that ``off`` means "no disk cache": the
others took ``off`` as a relative path, so a run with ``NNVM_CACHE_DIR=off`` left
``./off/opencl/`` and ``./off/pocl/`` in the current directory. Every package now asks this
module, and none of them reads the variable directly.

The rule:

- ``NNVM_CACHE_DIR`` unset or empty: the root is ``~/.cache/nnvm``;
- ``off``, ``0``, ``none`` or ``false`` (any case, surrounding blanks ignored): no disk cache
  anywhere; ``cache_root()`` and ``package_dir()`` return None and callers keep what they
  need in memory, for this process only, and write nothing to the current directory;
- anything else: that folder is the root.

Each package keeps its own folder under the root (``package_dir("opencl")``). The llvm
backend predates this layout and uses the variable's folder itself (``libs/``, ``runtime/``,
``native/`` directly in ``$NNVM_CACHE_DIR``), with ``~/.cache/nnvm/llvm`` as its default:
``cache_root(default=...)`` serves that convention. Nothing here creates a folder; callers
create theirs (0700 where native code is kept) when they write.
"""

from __future__ import annotations

import os

ENV = "NNVM_CACHE_DIR"
#: values of ``NNVM_CACHE_DIR`` that disable every disk cache (compared lower-cased, stripped)
OFF_VALUES = frozenset({"off", "0", "none", "false"})


def is_off(value: str | None) -> bool:
    """Whether ``value`` (a ``NNVM_CACHE_DIR`` setting) means "no disk cache"."""
    return value is not None and value.strip().lower() in OFF_VALUES


def disabled() -> bool:
    """Whether the environment disables every disk cache (``NNVM_CACHE_DIR=off``)."""
    return is_off(os.environ.get(ENV))


def default_root() -> str:
    """The root used when ``NNVM_CACHE_DIR`` is unset: ``~/.cache/nnvm``."""
    return os.path.join(os.path.expanduser("~"), ".cache", "nnvm")


def cache_root(default: str | None = None) -> str | None:
    """The cache root: ``$NNVM_CACHE_DIR`` when set, else ``default`` (else
    ``~/.cache/nnvm``); None when the variable disables caching. Creates nothing."""
    value = os.environ.get(ENV)
    if is_off(value):
        return None
    return value or default or default_root()


def package_dir(name: str) -> str | None:
    """A package's own cache folder, ``<root>/<name>`` (``opencl``, ``cuda``, ``sessions``),
    or None when caching is disabled. Creates nothing."""
    root = cache_root()
    return None if root is None else os.path.join(root, name)
