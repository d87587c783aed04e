"""Progress bars for the steps that can take seconds, for every NNVM package.

Backends and frontends call :func:`track` (a loop with a known length: kernels lowered,
nodes imported) or :func:`step` (one long call: ``tvm.compile``, an OpenCL program build)
and never import a progress library themselves, so the choice is made once, here.

Why tqdm (a dependency of nnvm-core) rather than rich: it is one pure-Python package with no
dependencies of its own (rich brings pygments and markdown-it-py, ~5 MB), writes to stderr,
and has what is needed: ``delay=`` so steps shorter than a second draw nothing, and
``leave=False`` so finished bars disappear and the log lines stay readable.

Bars are drawn only when stderr is a terminal (never in CI logs, pipes or files) and not
after :func:`set_enabled` ``(False)`` (the CLI's ``-q``). Independently of bars, each step is
logged (``nnvm.progress``: INFO when it starts, DEBUG with its duration when it ends), so a
long step is never silent in a log either.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")

logger = logging.getLogger("nnvm.progress")

#: seconds a step runs before its bar appears (shorter steps draw nothing)
DELAY = 1.0

_enabled: bool | None = None


def set_enabled(value: bool | None) -> None:
    """True/False force bars on/off; None (default) draws them when stderr is a terminal."""
    global _enabled
    _enabled = value


def enabled() -> bool:
    """Whether a bar would be drawn now."""
    if _enabled is not None:
        return _enabled
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:  # declared, but a trimmed install still works: no bars
        return None
    return tqdm


def track(items: Iterable[T], desc: str, total: int | None = None,
          unit: str = "items") -> Iterator[T]:
    """Iterate ``items`` with a bar ``desc [k/total unit]``."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    logger.info("%s (%s %s)", desc, "?" if total is None else total, unit)
    t0 = time.perf_counter()
    tqdm = _tqdm() if enabled() else None
    if tqdm is None:
        yield from items
    else:
        with tqdm(items, total=total, desc=desc, unit=unit, delay=DELAY, leave=False,
                  file=sys.stderr, dynamic_ncols=True) as bar:
            yield from bar
    logger.debug("%s: done in %.2f s", desc, time.perf_counter() - t0)


@contextlib.contextmanager
def step(desc: str) -> Iterator[None]:
    """A bar with the elapsed time for one long call that reports no progress itself."""
    logger.info("%s", desc)
    t0 = time.perf_counter()
    tqdm = _tqdm() if enabled() else None
    stop = threading.Event()
    ticker = None
    if tqdm is not None:
        bar = tqdm(total=None, desc=desc, bar_format="{desc}: {elapsed}", delay=DELAY,
                   leave=False, file=sys.stderr)

        def tick() -> None:
            while not stop.wait(0.5):
                if time.perf_counter() - t0 >= DELAY:  # refresh() itself ignores delay=
                    bar.refresh()
        ticker = threading.Thread(target=tick, name="nnvm-progress", daemon=True)
        ticker.start()
    try:
        yield
    finally:
        if ticker is not None:
            stop.set()
            ticker.join()
            bar.close()
        logger.debug("%s: done in %.2f s", desc, time.perf_counter() - t0)
