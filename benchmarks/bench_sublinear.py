"""Sublinear-memory training benchmark (Chen et al. 2016) on a deep residual MLP.

Builds the gradient graph of ``sum((x + sum_k dense(relu(dense(h_k))))^2)`` for ``--depth``
residual blocks (default 100) with respect to every weight, once plainly and once with the
Gradient pass option ``grad_mirror="sublinear"`` (``build_config(sublinear_memory=True)``),
plans memory with PlanMemory, and prints for both: planned activation bytes (the static
plan, i.e. the peak the runtime allocates), the peak of live values, op-node count,
matrix-multiply FLOPs, and the wall time of one run on the ``reference`` target. The two
gradient results are compared. Ratios are printed, nothing is asserted (the structural
memory ratio is asserted in tests/passes/test_sublinear.py at a smaller depth).

Usage: ``python benchmarks/bench_sublinear.py [--depth 100] [--batch 512] [--hidden 32]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nnvm import sym
from nnvm.interpreter import Interpreter
from nnvm.ir import Graph
from nnvm_passes.plan_memory import check_memory_plan


def residual_mlp(depth: int, hidden: int):
    h = sym.Variable("data")
    for i in range(depth):
        a = sym.relu(sym.dense(h, units=hidden, name=f"b{i}_fc1"))
        h = h + sym.dense(a, units=hidden, name=f"b{i}_fc2")
    return sym.sum(h * h) * (1.0 / (depth * hidden))


def gradient_graph(depth: int, batch: int, hidden: int, mirror) -> tuple[Graph, float]:
    loss = residual_mlp(depth, hidden)
    weights = [v for v in loss.list_input_variables() if v.name != "data"]
    shapes = {"data": (batch, hidden)}
    t0 = time.perf_counter()
    g = Graph(loss.outputs, {"grad_ys": loss.outputs, "grad_mirror": mirror,
                             "grad_xs": [e for w in weights for e in w.outputs],
                             "shape_inputs": shapes}).apply("Gradient")
    g = g.apply(["InferShape", "InferType", "PlanMemory"], shape_inputs=shapes,
                dtype_inputs={"data": "float32"})
    return g, time.perf_counter() - t0


def matmul_flops(g: Graph) -> int:
    """2*m*n*k for every dense/matmul node (the compute that recomputation repeats)."""
    idx, shapes = g.index, g.attrs["shape"]
    total = 0
    for nid, n in enumerate(idx.nodes):
        if n.op is None or n.op.name not in ("dense", "matmul"):
            continue
        out = shapes[idx.entry_rptr[nid]]
        a = shapes[idx.entry_id(n.inputs[0])]
        k = a[-2] if n.op.name == "matmul" and n.attrs.get("transpose_a") else a[-1]
        total += 2 * int(np.prod(out)) * int(k)
    return total


def run_time(g: Graph, feed: dict, repeat: int) -> tuple[float, list]:
    interp = Interpreter(g)
    out = interp.run(feed)
    t0 = time.perf_counter()
    for _ in range(repeat):
        interp.run(feed)
    return (time.perf_counter() - t0) / repeat, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = {}
    feed = None
    for label, mirror in (("plain", None), ("sublinear", "sublinear")):
        g, seconds = gradient_graph(args.depth, args.batch, args.hidden, mirror)
        stats = check_memory_plan(g)
        if feed is None:
            idx = g.index
            feed = {idx.nodes[i].name: (rng.standard_normal(g.attrs["shape"][idx.entry_rptr[i]])
                                        * (0.1 if idx.nodes[i].name != "data" else 1.0)
                                        ).astype("float32") for i in idx.input_nodes}
        wall, out = run_time(g, feed, args.repeat)
        rows[label] = dict(planned=g.attrs["storage_allocated_bytes"],
                           live=stats["peak_live_bytes"],
                           ops=sum(n.op is not None for n in g.index.nodes),
                           flops=matmul_flops(g), wall=wall, out=out, pass_s=seconds,
                           mirrored=g.attrs["grad_num_mirrored"],
                           checkpoints=len(g.attrs["grad_checkpoints"]))
    p, s = rows["plain"], rows["sublinear"]
    worst = max(float(np.max(np.abs(a - b)) / (np.max(np.abs(a)) + 1e-30))
                for a, b in zip(p["out"], s["out"]))
    print(f"residual MLP: depth {args.depth}, batch {args.batch}, hidden {args.hidden}")
    print(f"{'':<12} {'planned B':>12} {'peak live B':>12} {'ops':>6} {'MFLOP':>8} "
          f"{'run ms':>8} {'pass ms':>8}")
    for label, r in rows.items():
        print(f"{label:<12} {r['planned']:>12,} {r['live']:>12,} {r['ops']:>6} "
              f"{r['flops'] / 1e6:>8.1f} {r['wall'] * 1e3:>8.1f} {r['pass_s'] * 1e3:>8.1f}")
    print(f"sublinear / plain: planned memory {s['planned'] / p['planned']:.3f}, "
          f"peak live {s['live'] / p['live']:.3f}, ops +{s['ops'] / p['ops'] - 1:.1%}, "
          f"matmul FLOPs +{s['flops'] / p['flops'] - 1:.1%}, run time "
          f"{s['wall'] / p['wall']:.2f}x")
    print(f"{s['checkpoints']} checkpoints, {s['mirrored']} mirrored nodes; "
          f"max relative difference of the gradients {worst:.2e}")


if __name__ == "__main__":
    main()
