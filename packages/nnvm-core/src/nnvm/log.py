"""Logging for every NNVM package: one ``logging`` tree under ``nnvm``, and the CLI's ``-v/-q``.

Why the ``logging`` module: a library must not print; an application (or the CLI) decides
what it sees. Each package logs to a child of ``nnvm`` (``nnvm.compiler``, ``nnvm.session``,
``nnvm.runtime``, ``nnvm.onnx``, ``nnvm.llvm``, ``nnvm.opencl``...), so one
``logging.getLogger("nnvm").setLevel(...)`` controls them all, and per package when wanted.
As a library NNVM adds no handler: until the application configures logging, only WARNING
and above reach stderr (Python's last-resort handler), so a fallback or a kernel's NumPy
warning is seen once and progress lines are not. (A ``NullHandler``, the usual library
convention, would hide those warnings too.) The CLI calls :func:`configure`.
"""

from __future__ import annotations

import logging
import sys
import time

ROOT = "nnvm"

#: ``-q`` / default / ``-v`` / ``-vv`` -> level of the ``nnvm`` logger in the CLI
_LEVELS = {-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}


def get_logger(name: str) -> logging.Logger:
    """The logger for ``name`` under ``nnvm`` (``"llvm"`` -> ``nnvm.llvm``)."""
    return logging.getLogger(name if name == ROOT or name.startswith(ROOT + ".")
                             else f"{ROOT}.{name}")


class _CLIFormatter(logging.Formatter):
    """Stage lines as the CLI always printed them (``[  0.42s] message``); warnings and
    errors as ``nnvm: warning: message`` so they stand out in the stage lines."""

    def __init__(self):
        super().__init__()
        self.t0 = time.perf_counter()

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"nnvm: {record.levelname.lower()}: {message}"
        return f"[{time.perf_counter() - self.t0:7.2f}s] {message}"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record (not the one at
    configuration), so a redirected or captured stderr (tests, notebooks) gets the lines."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


_handler: logging.Handler | None = None


def configure(verbosity: int = 0) -> logging.Logger:
    """Set up the ``nnvm`` logger for the command line: ``verbosity`` -1 (``-q``: warnings
    and errors only, no progress bars), 0 (stage lines), 1 (``-v``: also per-pass timings,
    cache hits, per-step details). Idempotent: the previous CLI handler is replaced."""
    global _handler
    from . import progress

    root = logging.getLogger(ROOT)
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = _StderrHandler()
    _handler.setFormatter(_CLIFormatter())
    root.addHandler(_handler)
    root.setLevel(_LEVELS[max(-1, min(1, verbosity))])
    progress.set_enabled(False if verbosity < 0 else None)
    return root
