"""Measure schedule candidates of one kernel: compile them together, verify, time each.

Why one library per round of candidates: linking is most of a candidate's cost (``tvm.compile``
is per function, but the link and the load are per library), so the candidates of a round
are compiled as functions of one module, exactly as ``build`` does for a model (same
``_compile``: fast math, the bundled thread pool, a failing schedule replaced by its plain
loop nest and named). Each candidate then runs on the same random inputs through the same
thread pool a built model uses, at the thread count asked for.

Verification: the first candidate of a kernel is the heuristic's (the untuned kernel); its
outputs are the reference every other candidate must match (relative to the output's
magnitude, with room for the reassociation a different K blocking does). A candidate that
fails to schedule, compile or match is recorded with its error and never applied.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np

from ..compiler.codegen import _compile
from ..compiler.schedules import schedule
from ..runtime import buffers
from ..runtime.executor import _ffi, load_library

#: relative error (to the largest output magnitude) a candidate's outputs may have
VERIFY_RTOL = 1e-4
#: seconds one timing repeat of a candidate aims at (its calls are batched to last this long)
#: and the repeats per candidate: the minimum of many short repeats finds the quiet moments
#: of a shared machine (on a 2-core box at load 4, 20 x 3 ms at 1 thread reproduced a conv's
#: time within 1% whichever candidate ran first; 5 x 10 ms at 2 threads varied 2x)
REPEAT_SECONDS = 0.003
REPEATS = 20


class Kernel:
    """One kernel's candidates' common ground: its argument buffers and the reference."""

    def __init__(self, gl, lanes: int, seed: int = 0):
        self.gl, self.lanes = gl, lanes
        plain = gl.primfunc(lanes)
        self.n_inputs = len(gl.inputs)
        rng = np.random.default_rng(seed)
        self.arrays, self.unsupported = [], None
        for p in plain.params:  # TIRX: the parameters are the buffers
            shape, dtype = tuple(int(d) for d in p.shape), str(p.dtype)
            arr = buffers.view(buffers.aligned_empty(max(1, int(np.prod(shape, dtype=np.int64)))
                                                     * np.dtype(dtype).itemsize), shape, dtype)
            if len(self.arrays) < self.n_inputs:
                if np.dtype(dtype).kind != "f":
                    # index inputs (gathers) drawn at random could read out of bounds
                    self.unsupported = f"input {len(self.arrays)} is {dtype}, not float"
                arr[...] = rng.standard_normal(shape).astype(dtype) if arr.size else arr
            else:
                arr[...] = 0
            self.arrays.append(arr)
        self.reference: list[np.ndarray] | None = None

    def outputs(self) -> list[np.ndarray]:
        return self.arrays[self.n_inputs:]


def compile_round(kernel: Kernel, tgt, candidates: list[dict]):
    """``(library or None, {index: error})``: the candidates scheduled and compiled as
    functions ``cand<i>`` of one library."""
    funcs, errors = {}, {}
    gl, lanes = kernel.gl, kernel.lanes
    for i, knobs in enumerate(candidates):
        info = gl.schedule_info(lanes, knobs)
        try:
            func = schedule(gl.primfunc(lanes), info)
        except Exception as exc:  # noqa: BLE001 - a TVM schedule error: this candidate only
            errors[i] = f"schedule failed: {str(exc).strip().splitlines()[-1][:200]}"
            continue
        if knobs and not info.applied:
            errors[i] = "the template refused these knobs (plain loop nest)"
            continue
        funcs[f"cand{i}"] = (func.with_attr("global_symbol", f"cand{i}"),
                             lambda: gl.primfunc(lanes))
    if not funcs:
        return None, errors
    with tempfile.TemporaryDirectory(prefix="nnvm-tune-") as work:
        so_bytes, fallbacks = _compile(funcs, tgt, work)
    for name in fallbacks:
        errors[int(name[4:])] = "the scheduled kernel failed to compile"
    return load_library(so_bytes), errors


def run_round(kernel: Kernel, lib, candidates: list[dict], errors: dict, threads: int,
              repeats: int = REPEATS) -> list[tuple[float | None, str | None]]:
    """``(seconds or None, error or None)`` per candidate; the pool runs ``threads``.

    Every candidate is verified first; then the timing repeats go round the candidates
    (candidate 1, 2, ..., then again), each keeping its minimum, so a burst of load on a
    shared machine slows one repeat of every candidate instead of all repeats of one."""
    config = lib["nnvm_runtime_config"]
    config(int(threads))
    tvm_ffi = _ffi()
    args = [tvm_ffi.from_dlpack(a) for a in kernel.arrays]
    results: dict[int, tuple[float | None, str | None]] = {}
    try:
        timed = {}
        for i in range(len(candidates)):
            if i in errors:
                results[i] = (None, errors[i])
                continue
            fn = lib[f"cand{i}"]
            for out in kernel.outputs():
                out[...] = 0
            fn(*args)
            bad = _mismatch(kernel)
            if bad:
                results[i] = (None, bad)
            else:
                timed[i] = (fn, _calls_per_repeat(fn, args))
        best = {i: float("inf") for i in timed}
        for _ in range(repeats):
            for i, (fn, number) in timed.items():
                t0 = time.perf_counter()
                for _ in range(number):
                    fn(*args)
                best[i] = min(best[i], (time.perf_counter() - t0) / number)
        results.update({i: (t, None) for i, t in best.items()})
    finally:
        config(1)  # join the workers before the library can be unloaded
    return [results[i] for i in range(len(candidates))]


def _mismatch(kernel: Kernel) -> str | None:
    """None when the outputs match the reference (the first verified candidate's)."""
    outs = [o.copy() for o in kernel.outputs()]
    if kernel.reference is None:
        kernel.reference = outs
        return None
    for k, (got, want) in enumerate(zip(outs, kernel.reference)):
        if got.dtype.kind != "f":
            if not np.array_equal(got, want):
                return f"output {k} differs from the heuristic kernel's"
            continue
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        err = float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0))
        if not np.isfinite(err) or err > VERIFY_RTOL * scale * 10:
            return (f"output {k} differs from the heuristic kernel's (max abs error "
                    f"{err:.3g}, allowed {VERIFY_RTOL * scale * 10:.3g})")
    return None


def _calls_per_repeat(fn, args) -> int:
    """Calls in one timing repeat: enough to last ``REPEAT_SECONDS`` (1 to 1000)."""
    t0 = time.perf_counter()
    fn(*args)
    one = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(1000, int(REPEAT_SECONDS / one)))
