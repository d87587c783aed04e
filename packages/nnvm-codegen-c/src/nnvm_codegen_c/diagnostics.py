"""Compiler-error reporting shared by the C-like backends: which kernels a log points at."""

from __future__ import annotations

import re
from typing import Iterable


def kernels_at_lines(source: str, lines: Iterable[int], qualifier: str) -> list[str]:
    """Names of the kernels containing the 1-based ``lines`` of ``source``, in order, once each.

    Args:
        qualifier: the dialect's kernel keyword as a regex (``__kernel``, ``__global__``).
    """
    pattern = re.compile(rf"{qualifier}\b.*?void\s+(\w+)\s*\(")
    starts = [(i, m.group(1)) for i, text in enumerate(source.splitlines(), start=1)
              if (m := pattern.search(text))]
    names = []
    for line in sorted(set(lines)):
        inside = [name for start, name in starts if start <= line]
        if inside and inside[-1] not in names:
            names.append(inside[-1])
    return names


def clip_log(log: str, limit: int = 4000) -> str:
    """The compiler log, cut to ``limit`` characters so an error message stays readable."""
    tail = log.strip()
    return tail[:limit] + "\n..." if len(tail) > limit else tail
