"""Memory-plan benchmark: planned vs naive activation bytes for the zoo in nnvm.testing.models.

For each model (MLP, small CNN, MobileNet-, YOLO- and BERT-style), builds for the ``reference``
target at opt_level 0 (PlanMemory only) and at opt_level 2 (with fusion etc.), and prints the
activation bytes of the PlanMemory plan against one buffer per op output, the peak of live
values (a lower bound without in-place reuse), in-place reuses, and the chosen match range.
Each plan is verified by liveness simulation (``check_memory_plan``) before it is reported.

Usage: ``python benchmarks/bench_memory_plan.py [--batch N]``.
"""

from __future__ import annotations

import argparse
import time

import nnvm
from nnvm.testing import models
from nnvm_passes.plan_memory import check_memory_plan


def plan_model(name: str, opt_level: int, batch: int) -> dict:
    net, params, shapes = models.MODELS[name](batch=batch)
    t0 = time.perf_counter()
    graph, _ = nnvm.compiler.optimize(net, shape=shapes, params=params, opt_level=opt_level)
    seconds = time.perf_counter() - t0
    if "storage_id" not in graph.attrs:
        graph = graph.apply("PlanMemory")
    stats = check_memory_plan(graph)
    stats["inplace"] = sum(i >= 0 for i in graph.attrs["storage_inplace_index"])
    stats["match_range"] = graph.attrs.get("storage_match_range")
    stats["ops"] = sum(n.op is not None for n in graph.index.nodes)
    stats["seconds"] = seconds
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    header = (f"{'model':<10} {'O':>1} {'ops':>5} {'naive B':>11} {'planned B':>11} "
              f"{'ratio':>6} {'peak live B':>11} {'inplace':>7} {'range':>5} {'ms':>7}")
    print(header)
    print("-" * len(header))
    for name in models.MODELS:
        for level in (0, 2):
            s = plan_model(name, level, args.batch)
            print(f"{name:<10} {level:>1} {s['ops']:>5} {s['naive_bytes']:>11,} "
                  f"{s['planned_bytes']:>11,} {s['planned_bytes'] / s['naive_bytes']:>6.3f} "
                  f"{s['peak_live_bytes']:>11,} {s['inplace']:>7} {s['match_range']!s:>5} "
                  f"{s['seconds'] * 1e3:>7.1f}")


if __name__ == "__main__":
    main()
