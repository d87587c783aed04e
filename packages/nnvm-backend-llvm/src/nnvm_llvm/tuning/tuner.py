"""The search: for each distinct kernel of a model, measure up to ``trials`` knob settings.

AutoTVM-style, over the templates' own knobs (``schedules.knob_space``): round one is the
heuristic's setting plus its one-knob neighbours, later rounds the neighbours of the best
setting so far, then random settings once those are exhausted. Each round is compiled as one
library (``measure.compile_round``) and every candidate is verified against the heuristic
kernel before its time counts, and each time is also recorded relative to the heuristic's
in the same round (``relative``): on a shared machine the load differs between rounds, not
within one, so the ratio ranks settings of different rounds fairly. Each measurement is appended to the log at once, so the run
is resumable (a kernel with ``trials`` records is skipped, one with fewer continues) and
``budget`` seconds bound it (checked between rounds).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import time

from nnvm import progress
from nnvm.errors import NNVMError, format_error

from . import records

#: candidates compiled together in one library (one link, one load)
ROUND_SIZE = 8


@dataclasses.dataclass
class KernelResult:
    """What tuning did for one kernel (``seconds`` are per call, at ``threads``)."""

    kernel: str
    kind: str
    workload: str
    measured: int = 0
    resumed: int = 0
    heuristic_seconds: float | None = None
    best_seconds: float | None = None
    best_knobs: dict | None = None
    best_relative: float | None = None
    skipped: str | None = None

    @property
    def speedup(self) -> float | None:
        """Heuristic time over best time (by ``relative``: same-round times, when known)."""
        if self.best_relative:
            return 1.0 / self.best_relative
        if self.heuristic_seconds and self.best_seconds:
            return self.heuristic_seconds / self.best_seconds
        return None


@dataclasses.dataclass
class TuneResult:
    log: str
    target: str
    cpu: str
    threads: int
    seconds: float = 0.0
    out_of_budget: bool = False
    kernels: list[KernelResult] = dataclasses.field(default_factory=list)

    @property
    def measured(self) -> int:
        return sum(k.measured for k in self.kernels)


def _prepare(model, shape, dtype, params, opt_level, params_path=None):
    """``(optimised graph, params)`` exactly as ``nnvm.compiler.build`` makes them, so the
    kernels measured are the kernels ``build`` looks up."""
    from nnvm.compiler.build_module import optimize

    if isinstance(model, (str, os.PathLike)):
        from nnvm.cli import load_model

        graph, loaded = load_model(os.fspath(model), dict(shape or {}), dtype, params_path,
                                   lambda _msg: None)
        params = {**loaded, **(params or {})}
    else:
        graph = model
    names = set(getattr(graph, "attrs", {}).get("input_defaults") or ())
    params = {k: v for k, v in (params or {}).items() if k not in names}
    return optimize(graph, shape, dtype, params, opt_level)


def tune(model, target: str = "llvm", *, trials: int = 16, log: str | None = None,
         budget: float | None = None, threads: int | None = None, shape: dict | None = None,
         dtype="float32", params: dict | None = None, opt_level: int = 2,
         seed: int = 0, params_path: str | None = None) -> TuneResult:
    """Tune every kernel of ``model`` (a Graph/Symbol, or a model file path) for ``target``.

    Args:
        model: what ``build`` would compile; a path is imported like ``nnvm compile`` does.
        target: an llvm target string (``"llvm"``, ``"llvm -mcpu=znver4"``).
        trials: settings measured per kernel at most (the heuristic's included).
        log: the JSONL log appended to (default ``~/.cache/nnvm/tune/llvm.jsonl``, which
            ``build`` reads by default).
        budget: seconds for the whole run; the kernel in progress stops after its round.
        threads: kernel threads while timing (default: the target's ``-num-threads``,
            ``TVM_NUM_THREADS``, else every CPU).
        shape, dtype, params, opt_level: as for ``nnvm.compiler.build``.
        seed: the random settings' seed.
        params_path: a param dict file for a graph ``.json`` model (``nnvm compile``'s
            ``--params``).

    Returns:
        A :class:`TuneResult` (per kernel: records measured, heuristic and best times).

    Raises:
        NNVMError: ``target`` is not llvm, ``trials`` < 1, or the log is malformed.
    """
    from nnvm.backend import parse_target

    from ..compiler.codegen import kernel_lowerings
    from ..compiler.schedules import knob_space
    from ..compiler.target import tvm_target, vector_lanes
    from . import measure

    tgt_spec = parse_target(target)
    if tgt_spec.kind != "llvm":
        raise NNVMError(format_error("nnvm tune", f"target '{target}' is not llvm",
                                     "an llvm target", tgt_spec.kind,
                                     fix="Tuning measures CPU kernels: use --target llvm"))
    if trials < 1:
        raise NNVMError(format_error("nnvm tune", "trials must be at least 1", ">= 1", trials))
    t0 = time.perf_counter()
    deadline = t0 + budget if budget else None
    log = log or records.default_log()
    graph, params = _prepare(model, shape, dtype, params, opt_level, params_path)
    tgt = tvm_target(tgt_spec)
    lanes = vector_lanes(tgt)
    threads = int(threads or tgt_spec.get("num-threads") or os.environ.get("TVM_NUM_THREADS")
                  or os.cpu_count() or 1)
    cpu = records.cpu_model()
    result = TuneResult(log, str(tgt), cpu, threads)
    seen: dict[str, dict[str, dict]] = {}  # workload -> knobs key -> record
    for rec in records.read_log(log):
        if rec.get("target") == str(tgt) and rec.get("cpu") == cpu:
            seen.setdefault(rec["workload"], {})[records.knobs_key(rec["knobs"])] = rec
    rng = random.Random(seed)
    for gl in progress.track(kernel_lowerings(graph, params, lanes, tgt), "tuning kernels",
                             unit="kernels"):
        wl = records.workload_key(gl.signature)
        res = KernelResult(gl.pretty, gl.kind, wl)
        result.kernels.append(res)
        space = knob_space(gl.primfunc(lanes), gl.schedule_info(lanes))
        if threads == 1:  # serial always wins at one thread: nothing to learn about it
            space = {k: v[:1] if k in records.THREAD_KNOBS else v for k, v in space.items()}
        if not space:
            res.skipped = "no tunable template"
            continue
        done = seen.setdefault(wl, {})
        res.resumed = len(done)
        kernel = None
        while len(done) < min(trials, _size(space)):
            if deadline is not None and time.perf_counter() > deadline:
                result.out_of_budget = True
                break
            if kernel is None:
                kernel = measure.Kernel(gl, lanes, seed)
                if kernel.unsupported:
                    res.skipped = kernel.unsupported
                    break
            heuristic = {k: v[0] for k, v in space.items()}
            fresh = _next_round(space, done, min(ROUND_SIZE, trials - len(done)), rng)
            round_ = [heuristic] + [c for c in fresh if c != heuristic]
            lib, errors = measure.compile_round(kernel, tgt, round_)
            outcomes = measure.run_round(kernel, lib, round_, errors, threads) if lib else \
                [(None, errors.get(i)) for i in range(len(round_))]
            del lib
            base = outcomes[0][0]  # the heuristic, timed in this round like the others
            for knobs, (seconds, error) in zip(round_, outcomes):
                key = records.knobs_key(knobs)
                if key in done:
                    continue
                rec = {"workload": wl, "kernel": gl.pretty, "kind": gl.kind,
                       "target": str(tgt), "cpu": cpu, "knobs": knobs, "seconds": seconds,
                       "threads": threads, "error": error,
                       "relative": seconds / base if seconds and base else None}
                records.append_record(log, rec)
                done[key] = rec
                res.measured += 1
            if not fresh:
                break
        _summarise(res, done, space, threads)
        if result.out_of_budget:
            break
    result.seconds = time.perf_counter() - t0
    return result


def _size(space: dict) -> int:
    n = 1
    for v in space.values():
        n *= len(v)
    return n


def _neighbours(space: dict, point: dict) -> list[dict]:
    out = []
    for k, choices in space.items():
        for c in choices:
            if c != point.get(k):
                out.append({**point, k: c})
    return out


def _next_round(space: dict, done: dict, n: int, rng: random.Random) -> list[dict]:
    """Up to ``n`` unmeasured settings: the heuristic, neighbours of the best measured
    setting (greedy), then random ones."""
    heuristic = {k: v[0] for k, v in space.items()}
    ok = [r for r in done.values() if r.get("seconds") is not None]
    best = min(ok, key=records.rank_key(ok))["knobs"] if ok else heuristic
    pool = [heuristic] + rng.sample(_neighbours(space, best), len(_neighbours(space, best)))
    out: list[dict] = []
    keys = set(done)
    _take(pool, keys, out, n)
    if len(out) < n:
        if _size(space) <= 4096:
            rest = [dict(zip(space, combo)) for combo in itertools.product(*space.values())]
            rng.shuffle(rest)
        else:
            rest = [{k: rng.choice(v) for k, v in space.items()} for _ in range(4 * n)]
        _take(rest, keys, out, n)
    return out


def _take(candidates, keys: set, out: list, n: int) -> None:
    """Move unseen candidates into ``out`` until it holds ``n``."""
    for cand in candidates:
        if len(out) >= n:
            return
        key = records.knobs_key(cand)
        if key not in keys:
            keys.add(key)
            out.append(cand)


def _summarise(res: KernelResult, done: dict, space: dict, threads: int) -> None:
    heuristic = done.get(records.knobs_key({k: v[0] for k, v in space.items()}))
    ok = [r for r in done.values() if r.get("seconds") is not None
          and r.get("threads") == threads]
    if heuristic and heuristic.get("seconds") is not None:
        res.heuristic_seconds = heuristic["seconds"]
    if ok:
        best = min(ok, key=records.rank_key(ok))
        res.best_seconds, res.best_knobs = best["seconds"], best["knobs"]
        res.best_relative = best.get("relative")
