"""Kernels after fusion vs ops before, for the model families of ``nnvm.testing.models``.

Prints, per model and opt level, the op nodes of the symbol as written, the op nodes left
after the pipeline (SimplifyInference, PrecomputePrune, FoldScaleAxis... shrink it), and the
kernels a backend launches (fused groups; one per op when fusion is off), plus the build time.
Run: ``python benchmarks/bench_fusion.py``.
"""

from __future__ import annotations

import time

import nnvm
from nnvm.ir import Graph
from nnvm.testing.models import MODELS


def main() -> None:
    print(f"{'model':<10} {'level':>5} {'ops in':>7} {'ops out':>8} {'kernels':>8} "
          f"{'ops/kernel':>10} {'build ms':>9}")
    for name, builder in MODELS.items():
        net, params, shapes = builder()
        ops_in = sum(1 for n in Graph(net.outputs).index.nodes if n.op is not None)
        for level in range(4):
            t0 = time.perf_counter()
            lib = nnvm.compiler.build(net, target="reference", shape=shapes, params=params,
                                      opt_level=level)
            ms = (time.perf_counter() - t0) * 1e3
            ops_out = lib.stats()["num_nodes"]
            kernels = lib.graph.attrs.get("num_groups", ops_out)
            print(f"{name:<10} {level:>5} {ops_in:>7} {ops_out:>8} {kernels:>8} "
                  f"{ops_in / kernels:>10.2f} {ms:>9.1f}")


if __name__ == "__main__":
    main()
