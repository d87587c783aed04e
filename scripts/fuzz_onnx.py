"""Fuzz the ONNX importer and the back end: mutated real models must work or raise NNVMError.

Each case takes a seed (a real small model with inputs that import, build and run on
``reference``), applies mutations, then imports it, builds it and runs it. Anything other than
success or an ``NNVMError`` subclass (a raw exception, a crash, a hang past the per-case limit)
is a finding, printed with the case seed that reproduces it (``--replay CASE_SEED``).

Seeds (``fuzz_onnx_seeds.py``): the bundled digits MLP, the onnx wheel's stored model tests,
the onnx node tests that pass on ``reference`` and a few built models, all with concrete input
shapes. Mutations (``fuzz_onnx_mutations.py``): mostly ones that keep the model valid
(``onnx.checker`` with full shape inference decides) so that cases reach the back end; the
rest hostile (swapped ops, rewired inputs, absurd attributes and dims, flipped bytes).

The coverage line says which share of cases reached each step (import, build, run). The CI
test (tests/frontend_onnx/test_fuzz.py) runs 20,000 cases; run longer by hand:

    python scripts/fuzz_onnx.py --cases 100000 --seed 1 --workers 2
    python scripts/fuzz_onnx.py --cases 3000 --seed 2 --target llvm   # TVM builds: slower
    python scripts/fuzz_onnx.py --replay 1000003042      # one case in-process, its traceback
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import signal
import sys
import time
import traceback
import warnings
from multiprocessing import connection

if __name__ == "__main__":  # one BLAS thread per worker, set before NumPy loads its BLAS;
    # only as a script: imported by the tests, it must not change the pytest process's
    # environment (the llvm pool sizes itself from OMP_NUM_THREADS for every later test)
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

#: a case's own time limit (SIGALRM in the worker; 6x for native targets, whose builds of
#: the larger node-test graphs take seconds), and the parent's, which kills the worker
CASE_TIMEOUT_S = 10
#: address space a worker may allocate: a mutated dim of 2**34 must fail, not swap the box
WORKER_MEMORY_BYTES = 3 << 30
#: inputs larger than this are not fed (the case stops after build)
MAX_RUN_ELEMENTS = 1 << 20
STAGES = ("parse", "import", "build", "run")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_onnx_mutations import VALID_MUTATIONS, Case, make_case  # noqa: E402,F401
from fuzz_onnx_seeds import (Seed, attribute_pool, built_seeds, load_seeds,  # noqa: E402,F401
                             node_seeds)


# ---------------------------------------------------------------- running one case


class _Hang(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Hang(f"no result within {CASE_TIMEOUT_S}s")


def execute(case: Case, check: bool = False) -> tuple[str, str, str | None]:
    """Import, build (for ``TARGET``, ``reference`` unless ``--target`` says) and run one
    case.

    Returns ``(stage, outcome, finding)``: the last stage entered, ``ok`` / ``nnvm_error`` /
    ``finding``, and the finding's text (exception and the frames that raised it).
    """
    import nnvm
    from nnvm.errors import NNVMError
    from nnvm_onnx.errors import NeedsConstantError

    from nnvm_onnx.loader import load_model

    stage = "parse"
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        proto, _ = load_model(case.model, check=False)
        stage = "import"
        feed = case.feed
        frozen: dict = {}
        while True:
            try:
                graph, params = nnvm.frontend.from_onnx(
                    proto, shape={k: v.shape for k, v in feed.items() if k not in frozen},
                    dtype={k: v.dtype.name for k, v in feed.items() if k not in frozen},
                    freeze=frozen or None, check=check)
                break
            except NeedsConstantError as exc:
                new = [n for n in exc.inputs if n in feed and n not in frozen]
                if not new:
                    raise
                frozen.update({n: feed[n] for n in new})
        stage = "build"
        module = nnvm.compiler.build(graph, target=TARGET, params=params,
                                     shape=graph.attrs.get("shape_inputs"),
                                     dtype=graph.attrs.get("dtype_inputs"))
        stage = "run"
        names = [n for n in module.input_names if n in feed and n not in frozen]
        if sum(feed[n].size for n in names) > MAX_RUN_ELEMENTS:
            return "build", "ok", None
        module.run(**{n: feed[n] for n in names})
        return stage, "ok", None
    except NNVMError:
        return stage, "nnvm_error", None
    except _Hang as exc:
        return stage, "finding", f"hang at {stage}: {exc}"
    except BaseException as exc:  # noqa: BLE001 - every other exception is a finding
        if isinstance(exc, KeyboardInterrupt):
            raise
        tb = "".join(traceback.format_tb(exc.__traceback__)[-6:])
        head = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:400]
        return stage, "finding", f"{head}\n{tb}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------- driving many cases

_SEEDS: list = []
_POOL: dict = {}
TARGET = "reference"


def case_seed(seed: int, i: int) -> int:
    return seed * 1_000_003 + i


def make_one(cs: int):
    """The case with seed ``cs`` and its Random (which execute() goes on drawing from)."""
    rnd = random.Random(cs)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return make_case(_SEEDS, _POOL, rnd), rnd


def run_one(case: Case, rnd: random.Random) -> tuple:
    """execute()'s triple, a label and the mutation kinds."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        stage, outcome, finding = execute(case, check=rnd.random() < 0.2)
    label = f"{case.seed} [{'+'.join(case.kinds) or 'none'}]"
    return stage, outcome, finding, label, tuple(case.kinds)


def _limit_memory() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 to /dev/null for a while (C++ writes there, not to sys.stderr)."""
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _worker(conn) -> None:
    """Cases in, results out. "made" is sent between mutating and executing, so that the
    parent can tell onnx's own C++ aborting in the fuzzer's checker/shape-inference calls
    (not a finding about nnvm) from nnvm crashing the process (a finding)."""
    import faulthandler

    faulthandler.disable()  # onnx aborting is counted by the parent, not dumped as noise
    logging.getLogger("nnvm").setLevel(logging.ERROR)  # NaN warnings of mutated models
    _limit_memory()
    while True:
        cs = conn.recv()
        if cs is None:
            return
        try:
            with _quiet_stderr():  # onnx's C++ assertion text, when it aborts
                case, rnd = make_one(cs)
        except Exception:  # noqa: BLE001 - the fuzzer's own bug: reported, never hidden
            conn.send(("done", "parse", "finding", traceback.format_exc(),
                       "fuzzer bug in make_case", ()))
            continue
        conn.send(("made",))
        conn.send(("done", *run_one(case, rnd)))


class Stats:
    """Outcome counts per stage and the coverage line."""

    def __init__(self) -> None:
        self.cases = 0
        self.reached = dict.fromkeys(STAGES, 0)
        self.passed = dict.fromkeys(STAGES, 0)
        self.nnvm_errors = dict.fromkeys(STAGES, 0)
        self.by_kind: dict = {}  # mutation -> [cases, cases that reached build]
        self.onnx_crashes = 0  # onnx's C++ aborted inside the fuzzer's own checker calls

    def add(self, stage: str, outcome: str, kinds=()) -> None:
        self.cases += 1
        for k in kinds:
            row = self.by_kind.setdefault(k, [0, 0])
            row[0] += 1
            row[1] += STAGES.index(stage) >= STAGES.index("build")
        order = STAGES.index(stage)
        for s in STAGES[:order + 1]:
            self.reached[s] += 1
        for s in STAGES[:order]:
            self.passed[s] += 1
        if outcome == "ok":
            self.passed[stage] += 1
        elif outcome == "nnvm_error":
            self.nnvm_errors[stage] += 1

    def kinds_line(self) -> str:
        return "reach-build share by mutation: " + ", ".join(
            f"{k} {100.0 * b / n:.0f}% of {n}" for k, (n, b) in sorted(self.by_kind.items()))

    def share(self, stage: str) -> float:
        return self.reached[stage] / max(self.cases, 1)

    def line(self) -> str:
        pct = {s: 100.0 * self.reached[s] / max(self.cases, 1) for s in STAGES}
        ran = 100.0 * self.passed["run"] / max(self.cases, 1)
        errs = ", ".join(f"{s} {self.nnvm_errors[s]}" for s in STAGES[1:])
        return (f"{self.cases} cases: reached import {pct['import']:.1f}%, build "
                f"{pct['build']:.1f}%, run {pct['run']:.1f}%, ran to the end {ran:.1f}%; "
                f"NNVMError at {errs}; {self.onnx_crashes} skipped (onnx aborted in the "
                "fuzzer's own checker call)")


class _Pool:
    """Forked workers, one case each at a time: a worker that dies is replaced, one that
    executes a case for longer than 3 x CASE_TIMEOUT_S is killed (a hang inside C code that SIGALRM
    cannot stop). A killed case runs once more in a fresh worker before it counts as a hang,
    so that a loaded machine starving a worker is not reported as nnvm hanging."""

    def __init__(self, workers: int, record, onnx_crash) -> None:
        import multiprocessing as mp

        self.ctx = mp.get_context("fork")
        self.record, self.onnx_crash = record, onnx_crash
        self.busy: dict = {}  # pipe -> [process, case seed, started, executing?]
        self.idle = [self._spawn() for _ in range(max(1, workers))]
        self.retry: list = []  # cases killed once, to run again
        self.killed: set = set()

    def _spawn(self):
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        p.start()
        child.close()
        return parent, p

    def submit(self, cs: int) -> None:
        conn, proc = self.idle.pop()
        conn.send(cs)
        self.busy[conn] = [proc, cs, time.time(), False]

    def _lost(self, conn, why: str, timeout: bool = False) -> None:
        proc, cs, _t, executing = self.busy.pop(conn)
        proc.kill()
        proc.join()
        if not executing:
            self.onnx_crash(cs)
        elif timeout and cs not in self.killed:
            self.killed.add(cs)
            self.retry.append(cs)
        else:
            self.record(cs, "import", "finding", why, "crash or hang")
        self.idle.append(self._spawn())

    def poll(self) -> None:
        """Wait up to a second; record what finished; replace dead or stuck workers."""
        for conn in connection.wait(list(self.busy), timeout=1.0):
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                self._lost(conn, f"worker died (exit code {self.busy[conn][0].exitcode})")
                continue
            if msg[0] == "made":  # the execution's own clock starts now
                self.busy[conn][2:] = [time.time(), True]
                continue
            proc, cs, _t, _x = self.busy.pop(conn)
            self.record(cs, *msg[1:])
            self.idle.append((conn, proc))
        for conn, (proc, cs, t0, _x) in list(self.busy.items()):
            if time.time() - t0 > 3 * CASE_TIMEOUT_S:
                self._lost(conn, f"no result within {3 * CASE_TIMEOUT_S}s, twice (worker killed)",
                           timeout=True)

    def close(self) -> None:
        for conn, proc in self.idle:
            conn.send(None)
            proc.join(5)
        for proc, *_ in self.busy.values():
            proc.kill()


def fuzz(cases: int, seed: int = 0, workers: int = 2, time_budget_s: float | None = None,
         node_tests: bool = True, verbose: bool = False, target: str = "reference"
         ) -> tuple[list, Stats]:
    """Run ``cases`` cases in ``workers`` forked processes (each case bounded by a timeout and
    the worker by a memory limit); returns ``([(case seed, finding)], Stats)``."""
    global _SEEDS, _POOL, TARGET, CASE_TIMEOUT_S

    TARGET = target
    CASE_TIMEOUT_S = 10 if target == "reference" else 60
    _SEEDS = load_seeds(node_tests)
    _POOL = attribute_pool(_SEEDS)
    check_seeds(_SEEDS[:4])  # imports the importer, passes and kernels once, before forking
    stats, findings = Stats(), []

    def record(cs, stage, outcome, finding, label, kinds=()):
        stats.add(stage, outcome, kinds)
        if finding is not None:
            findings.append((cs, f"{label}: {finding}"))
            if verbose:
                print(f"case seed {cs}, {label}:\n{finding}", flush=True)

    def onnx_crash(cs):
        stats.onnx_crashes += 1
        if verbose:
            print(f"case seed {cs}: onnx aborted while the fuzzer mutated the model (skipped)",
                  flush=True)

    pool = _Pool(workers, record, onnx_crash)
    start, i = time.time(), 0
    try:
        while True:
            while pool.idle and pool.retry:
                pool.submit(pool.retry.pop())
            while pool.idle and i < cases and (time_budget_s is None
                                               or time.time() - start < time_budget_s):
                pool.submit(case_seed(seed, i))
                i += 1
            if not pool.busy and not pool.retry:
                break
            pool.poll()
    finally:
        pool.close()
    return findings, stats


def check_seeds(seeds: list[Seed]) -> list[tuple[str, str, str]]:
    """Seeds that do not import, build and run unmutated: [(name, stage, why)]."""
    bad = []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for s in seeds:
            stage, outcome, finding = execute(Case(s.name, [], s.model, dict(s.feed), True),
                                              check=True)
            if outcome != "ok" or stage != "run":
                bad.append((s.name, stage, finding or outcome))
    return bad


def replay(cs: int, node_tests: bool = True) -> int:
    """Make one case in-process and execute it; a finding is printed with its traceback."""
    global _SEEDS, _POOL
    _SEEDS = load_seeds(node_tests)
    _POOL = attribute_pool(_SEEDS)
    case, rnd = make_one(cs)
    print(f"seed {case.seed}, mutations {case.kinds}, onnx.checker accepts it: "
          f"{case.checker_ok}")
    stage, outcome, finding, _label, _kinds = run_one(case, rnd)
    print(f"{outcome} at {stage}" + (f":\n{finding}" if finding else ""))
    return 1 if finding else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=20000, help="how many cases to run")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (case i's seed is "
                   "seed * 1000003 + i)")
    p.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 4),
                   help="forked worker processes")
    p.add_argument("--time-budget", type=float, default=None, help="seconds")
    p.add_argument("--no-node-tests", action="store_true",
                   help="seeds without the onnx node tests (faster start)")
    p.add_argument("--replay", type=int, default=None, metavar="CASE_SEED",
                   help="make and run one case in this process, printing what it raised")
    p.add_argument("--target", default="reference",
                   help="build target (reference is fast; llvm takes seconds per case)")
    p.add_argument("--check-seeds", action="store_true",
                   help="check that every seed imports, builds and runs unmutated")
    args = p.parse_args(argv)
    global TARGET, CASE_TIMEOUT_S
    TARGET = args.target
    CASE_TIMEOUT_S = 10 if TARGET == "reference" else 60
    if args.replay is not None:
        return replay(args.replay, not args.no_node_tests)
    if args.check_seeds:
        seeds = load_seeds(not args.no_node_tests)
        bad = check_seeds(seeds)
        for name, stage, why in bad:
            print(f"{name}: fails at {stage}: {why}")
        print(f"{len(seeds) - len(bad)}/{len(seeds)} seeds import, build and run")
        return 1 if bad else 0
    t0 = time.time()
    findings, stats = fuzz(args.cases, args.seed, args.workers, args.time_budget,
                           not args.no_node_tests, verbose=True, target=args.target)
    print(f"{len(_SEEDS)} seeds; {stats.line()}")
    print(stats.kinds_line())
    print(f"{len(findings)} finding(s) in {time.time() - t0:.0f}s")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
