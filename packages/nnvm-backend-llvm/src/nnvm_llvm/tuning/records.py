"""Tuning logs: one JSON record per measured candidate, keyed by workload, target and CPU.

A log is JSON Lines, appended to as candidates are measured (so an interrupted ``nnvm tune``
loses at most the candidate in flight, and a rerun continues from what is there). A record::

    {"v": 1, "workload": "<sha256 of the kernel signature, 24 hex>", "kernel": "dense_relu",
     "kind": "dense", "target": "llvm -keys=cpu -mcpu=znver4", "cpu": "<model> | avx512f,avx2",
     "knobs": {"mr": 4, "nr": 32, "kc": 0, "parallel": true}, "seconds": 1.2e-05,
     "threads": 2, "error": null, "relative": 0.93}

``relative`` is ``seconds`` over the heuristic setting's time in the same round of
candidates (load on a shared machine changes between rounds more than within one), and
ranks the records of a workload when all have it. ``seconds`` is null and ``error`` says why when the candidate failed to schedule, compile or
verify. The key is the kernel's signature (ops, attributes, wiring, shapes, dtypes, packing:
the same text the kernel cache hashes, without the compiler's source version, so a log
survives upgrades), the TVM target string, and the CPU model with the ISA flags the
templates depend on: a log measured on another CPU is ignored, never applied.

This module imports no TVM: ``build`` reads logs before anything is compiled.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
from typing import Iterable

from nnvm.errors import NNVMError, format_error

RECORD_VERSION = 1
#: ISA flags the templates' choices depend on (vector width, FMA); part of the CPU key
CPU_FLAGS = ("avx512f", "avx2", "fma", "neon", "asimd")
_REQUIRED = ("workload", "target", "cpu", "knobs")
#: knobs whose best value depends on the thread count, not only on the CPU and the shape
THREAD_KNOBS = frozenset({"parallel"})


def default_log() -> str:
    """Where ``nnvm tune`` writes without ``--log``, and what ``build`` reads by default."""
    return os.path.join(os.path.expanduser("~"), ".cache", "nnvm", "tune", "llvm.jsonl")


def cpu_model() -> str:
    """``"<model name> | <flags>"`` from /proc/cpuinfo (Linux), else the platform's name."""
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "CPU part") and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    return f"{model} | {','.join(f for f in CPU_FLAGS if f in flags)}"


def workload_key(signature: str) -> str:
    """The stable key of a kernel (its signature's hash, no compiler version in it)."""
    return hashlib.sha256(signature.encode()).hexdigest()[:24]


def knobs_key(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True)


def read_log(path: str) -> list[dict]:
    """Every record of one log (an absent file has none).

    Raises:
        NNVMError: a line that is not a JSON object with the record's fields, naming the
            file and the line number.
    """
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise NNVMError(format_error(f"tuning log '{path}'", f"cannot be read ({exc})",
                                     fix="Check the path given by --log, tune_log= or "
                                         "NNVM_TUNE_LOG")) from None
    out = []
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                rec, why = None, f"is not JSON ({exc.msg} at column {exc.colno})"
            else:
                missing = [k for k in _REQUIRED if not isinstance(rec, dict) or k not in rec]
                why = f"lacks the field(s) {', '.join(missing)}" if missing else ""
                if not why and not isinstance(rec["knobs"], dict):
                    why = "has knobs that are not an object"
            if why:
                raise NNVMError(format_error(
                    f"tuning log '{path}', line {n}", why,
                    "one JSON record per line as written by `nnvm tune`", line.strip()[:120],
                    fix="Delete or fix that line (an interrupted write leaves at most the last "
                        "line broken), or point tune_log elsewhere"))
            out.append(rec)
    return out


_append_lock = threading.Lock()


def append_record(path: str, record: dict) -> None:
    """Append one record and flush it to disk (a crash loses nothing measured before)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = json.dumps({"v": RECORD_VERSION, **record}, sort_keys=True) + "\n"
    with _append_lock, open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def log_paths(option) -> list[str]:
    """The logs a build reads: ``tune_log=`` (a path or a list; ``"off"``/False: none),
    else ``NNVM_TUNE_LOG`` (paths joined by ``os.pathsep``), else :func:`default_log`."""
    if option is None:
        env = os.environ.get("NNVM_TUNE_LOG")
        option = env.split(os.pathsep) if env else [default_log()]
    if option is False or (isinstance(option, str) and option.lower() in ("off", "none", "")):
        return []
    paths = [option] if isinstance(option, (str, os.PathLike)) else list(option)
    return [os.fspath(p) for p in paths if p and str(p).lower() not in ("off", "none")]


_parsed: dict[str, tuple[tuple[int, int], list[dict]]] = {}


def _cached_read(path: str) -> list[dict]:
    """``read_log`` once per file version (size and mtime): builds read the logs each time."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    stamp = (st.st_size, st.st_mtime_ns)
    hit = _parsed.get(path)
    if hit is None or hit[0] != stamp:
        hit = (stamp, read_log(path))
        _parsed[path] = hit
    return hit[1]


#: the least gain (as a fraction of the heuristic's time, in the same round) for which a
#: tuned setting replaces the heuristic's: timings on a shared machine scatter by a few
#: percent, and a "winner" inside that scatter made tuned corpus builds slower than untuned
MIN_GAIN = 0.03


def best_records(paths: Iterable[str], target: str, cpu: str,
                 threads: int | None = None) -> dict[str, dict]:
    """``{workload: fastest successful record}`` for this target and CPU across ``paths``.

    When records of a workload were measured at several thread counts, those at
    ``threads`` (the build's) win; else every count competes for the tiles, and the
    thread-dependent knobs (``THREAD_KNOBS``) are dropped from the winner (see
    :func:`settled` for a winner within the timing scatter)."""
    by_workload: dict[str, list[dict]] = {}
    for path in paths:
        for rec in _cached_read(path):
            if rec.get("target") != target or rec.get("cpu") != cpu \
                    or rec.get("error") or not isinstance(rec.get("seconds"), (int, float)):
                continue
            by_workload.setdefault(rec["workload"], []).append(rec)
    best = {}
    for wl, recs in by_workload.items():
        same = [r for r in recs if threads and r.get("threads") == threads]
        rec = settled(same or recs)
        if not same and THREAD_KNOBS & set(rec["knobs"]):
            # whether to run in parallel was decided at another thread count (at 1 thread
            # serial always wins): keep the heuristic's choice for this build's count
            rec = {**rec, "knobs": {k: v for k, v in rec["knobs"].items()
                                    if k not in THREAD_KNOBS}}
        best[wl] = rec
    return best


def settled(recs: list[dict]) -> dict:
    """The record a build applies among one workload's: the fastest (:func:`rank_key`),
    unless it beats the heuristic's setting (``relative`` 1.0, timed in the same rounds) by
    less than ``MIN_GAIN``; then the heuristic's record, whose knobs make the untuned kernel."""
    rec = min(recs, key=rank_key(recs))
    if isinstance(rec.get("relative"), (int, float)) and rec["relative"] > 1 - MIN_GAIN:
        heuristic = [r for r in recs if r.get("relative") == 1.0]
        if heuristic:
            return min(heuristic, key=lambda r: r["seconds"])
    return rec


def rank_key(recs: list[dict]):
    """Rank by ``relative`` (time over the heuristic's in the same round: fair between
    rounds run under different load) when every record has it, else by ``seconds``."""
    if all(isinstance(r.get("relative"), (int, float)) for r in recs):
        return lambda r: r["relative"]
    return lambda r: r["seconds"]
