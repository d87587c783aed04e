"""Ray batch inference: throughput with 1 and 2 workers, and what Ray adds per batch.

Runs one artifact three ways over the same rows, interleaved round by round so that the
load of a shared machine hits every way alike:

- ``direct``: ``nnvm_ray.ArtifactRunner.run_rows`` in this process, one batch at a time
  (what one actor does, without Ray);
- ``ray xW``: ``nnvm_ray.map_batches`` with W actors (1 and 2) on a local Ray cluster, the
  input already materialised in the object store, the output materialised there too.

A Ray run has a fixed cost (starting the actor pool, each actor loading the artifact,
planning the job) and a cost per batch. The output is consumed as a stream and every batch's
arrival is timed: the rate from the first arrival to the last is the steady-state throughput
(start-up excluded); one worker's time per batch at that rate, minus ``direct``, is Ray's
overhead per batch (scheduling, moving the batch and its result through the object store,
Arrow <-> NumPy, handing it to the driver); the rest of the wall time is the fixed cost.
Medians over the rounds, and the best round (on a shared machine, the one least disturbed by
other work); the load average is printed before and after.

The model is an MLP (256 -> 1024 -> 1024 -> 10, softmax) compiled for the best target
(llvm when installed: one kernel thread, as each actor gets one CPU), or ``--artifact``.

Usage: ``python benchmarks/bench_ray.py [--rows 16384] [--batch-size 64] [--rounds 3]
[--target llvm] [--artifact model.nnvm]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

import numpy as np


def build_mlp(path: str, target: str, batch: int) -> None:
    import nnvm
    from nnvm import sym

    x = sym.Variable("x")
    h = sym.relu(sym.dense(x, units=1024, name="fc1"))
    h = sym.relu(sym.dense(h, units=1024, name="fc2"))
    y = sym.softmax(sym.dense(h, units=10, name="fc3"), name="prob")
    rng = np.random.default_rng(0)
    shapes = {"fc1_weight": (1024, 256), "fc1_bias": (1024,), "fc2_weight": (1024, 1024),
              "fc2_bias": (1024,), "fc3_weight": (10, 1024), "fc3_bias": (10,)}
    params = {k: (rng.standard_normal(s) * 0.05).astype("float32") for k, s in shapes.items()}
    if target.split()[0] == "llvm" and "-num-threads" not in target:
        target += " -num-threads=1"
    nnvm.compiler.build(nnvm.graph.create(y), target=target, shape={"x": (batch, 256)},
                        params=params).export(path)


def random_rows(signature, rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {p.name: rng.standard_normal((rows, *p.row_shape)).astype(p.dtype)
            for p in signature.inputs}


def time_direct(artifact: str, columns: dict, batch_size: int) -> float:
    """Seconds per batch of ``batch_size`` rows, in this process, one thread."""
    from nnvm_ray import ArtifactRunner

    runner = ArtifactRunner(artifact, num_threads=1)
    rows = len(next(iter(columns.values())))
    runner.run_rows({k: v[:batch_size] for k, v in columns.items()})  # warm-up
    t0 = time.perf_counter()
    for start in range(0, rows, batch_size):
        runner.run_rows({k: v[start:start + batch_size] for k, v in columns.items()})
    return (time.perf_counter() - t0) / -(-rows // batch_size)


def time_ray(ray, artifact: str, data, rows: int, batch_size: int,
             workers: int) -> tuple[float, float]:
    """One map_batches job: (wall seconds, steady-state rows/s after the first batch)."""
    import nnvm_ray

    t0 = time.perf_counter()
    out = nnvm_ray.map_batches(data, artifact, batch_size=batch_size, concurrency=workers)
    arrivals, counts = [], []
    for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
        arrivals.append(time.perf_counter())
        counts.append(len(next(iter(batch.values()))))
    wall = time.perf_counter() - t0
    assert sum(counts) == rows, (sum(counts), rows)
    steady = sum(counts[1:]) / (arrivals[-1] - arrivals[0])
    return wall, steady


def report(label: str, stats: dict, rows: int, batch_size: int) -> None:
    direct = stats["direct"]
    print(f"\n{label}: direct (no Ray, 1 thread) {direct * 1e3:.2f} ms/batch, "
          f"{batch_size / direct:,.0f} rows/s")
    print(f"{'workers':>7} {'wall s':>7} {'fixed s':>7} {'rows/s steady':>13} "
          f"{'rows/s wall':>11} {'ms/batch/worker':>15} {'Ray overhead ms/batch':>21}")
    for workers in (1, 2):
        wall, steady = stats[f"wall x{workers}"], stats[f"steady x{workers}"]
        per_batch = workers * batch_size / steady  # one worker's seconds per batch
        print(f"{workers:>7} {wall:>7.2f} {wall - rows / steady:>7.2f} {steady:>13,.0f} "
              f"{rows / wall:>11,.0f} {per_batch * 1e3:>15.2f} "
              f"{(per_batch - direct) * 1e3:>21.2f}")
    print(f"2 workers / 1 worker, steady: {stats['steady x2'] / stats['steady x1']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--target", help="default: nnvm's best target here")
    parser.add_argument("--artifact", help="an existing .nnvm (one input) instead of the MLP")
    args = parser.parse_args()

    import nnvm
    import ray
    from nnvm.backend import best_target
    from nnvm_ray.runner import read_signature

    artifact = args.artifact
    if artifact is None:
        artifact = os.path.join(tempfile.mkdtemp(prefix="bench-ray-"), "mlp.nnvm")
        build_mlp(artifact, args.target or best_target(), args.batch_size)
    signature = read_signature(artifact)
    columns = random_rows(signature, args.rows)
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs; artifact target {nnvm.runtime.load(artifact).target}; "
          f"batch {args.batch_size} rows; N = {args.rows} rows; ray {ray.__version__}")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False

    logging.getLogger("ray.data").setLevel(logging.ERROR)
    (name,) = signature.input_names if len(signature.inputs) == 1 else (None,)
    if name is None:
        raise SystemExit("bench_ray: models with one input only (--artifact)")
    x = columns[name]  # one block per batch: a Ray task maps whole blocks
    data = ray.data.from_numpy([x[i:i + args.batch_size] for i in range(0, len(x),
                                args.batch_size)]).rename_columns({"data": name}).materialize()

    results: dict[str, list[float]] = {}
    for r in range(args.rounds):
        results.setdefault("direct", []).append(
            time_direct(artifact, columns, args.batch_size))
        for workers in (1, 2):
            wall, steady = time_ray(ray, artifact, data, args.rows, args.batch_size, workers)
            results.setdefault(f"wall x{workers}", []).append(wall)
            results.setdefault(f"steady x{workers}", []).append(steady)
        print(f"round {r + 1}: direct {results['direct'][-1] * 1e3:.2f} ms/batch; " + ", ".join(
            f"{w} worker(s) {results[f'wall x{w}'][-1]:.2f} s wall, "
            f"{results[f'steady x{w}'][-1]:,.0f} rows/s steady" for w in (1, 2)))
    ray.shutdown()

    # Medians, and the best round (fastest direct, highest rates): on a shared machine the
    # best round is the one least disturbed by other work.
    for label, pick in (("median", statistics.median), ("best round", None)):
        if pick is None:
            stats = {k: (min(v) if k == "direct" or k.startswith("wall") else max(v))
                     for k, v in results.items()}
        else:
            stats = {k: pick(v) for k, v in results.items()}
        report(label, stats, args.rows, args.batch_size)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
