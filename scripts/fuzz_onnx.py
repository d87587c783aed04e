"""Fuzz the ONNX importer: mutated real models and random bytes must give NNVMError or work.

Anything else (a raw exception, a crash, a hang past the per-case limit) is a finding, printed
with the seed that reproduces it. The CI test (tests/frontend_onnx/test_fuzz.py) runs a bounded
number of cases; run longer by hand:

    python scripts/fuzz_onnx.py --cases 5000 --seed 1
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
import traceback

import numpy as np

CASE_TIMEOUT_S = 10
STATS = {"ok": 0, "nnvm_error": 0}
_MAX_RUN_ELEMENTS = 1 << 16


def seed_models() -> list:
    """Real-looking models to mutate: the test models plus a few node-suite models."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    H = helper.make_node
    models = []
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "tests", "frontend_onnx"))
    try:
        import test_models as tm

        models += [tm.yolo_model(rng), tm.ocr_model(rng), tm.bert_model(rng),
                   tm.vad_model(rng), tm.vad_model(rng, same_framing=True)]
    except Exception:  # noqa: BLE001 - the tests directory is optional for the script
        pass
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    g = helper.make_graph(
        [H("MatMul", ["x", "w"], ["m"]), H("Relu", ["m"], ["r"]),
         H("ReduceSum", ["r"], ["y"], keepdims=1)], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    models.append(m)
    return models


_OPS = ["Relu", "Add", "Reshape", "Concat", "Slice", "Gather", "Conv", "MatMul", "Transpose",
        "Squeeze", "Unsqueeze", "Shape", "Expand", "Tile", "Pad", "Resize", "Split", "If",
        "Loop", "Softmax", "ReduceMean", "Cast", "ConstantOfShape", "Range", "TopK", "NoSuchOp"]


def mutate(model, rnd: random.Random) -> bytes:
    """One random mutation, structural (on the proto) or on the serialized bytes."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    kind = rnd.randrange(10)
    nodes = m.graph.node
    if kind == 0 and nodes:
        rnd.choice(nodes).op_type = rnd.choice(_OPS)
    elif kind == 1 and nodes:
        n = rnd.choice(nodes)
        if n.input:
            n.input[rnd.randrange(len(n.input))] = rnd.choice(["", "nope", *[o for x in nodes
                                                                        for o in x.output]])
    elif kind == 2 and nodes:
        n = rnd.choice(nodes)
        for a in n.attribute:
            if a.ints:
                a.ints[rnd.randrange(len(a.ints))] = rnd.choice([-5, -1, 0, 1, 7, 1 << 40])
            elif a.type == a.INT:
                a.i = rnd.choice([-3, 0, 1, 2, 99])
            elif a.type == a.FLOAT:
                a.f = rnd.choice([0.0, -1.0, float("nan"), 1e30])
    elif kind == 3 and m.graph.initializer:
        t = rnd.choice(m.graph.initializer)
        if t.dims:
            t.dims[rnd.randrange(len(t.dims))] = rnd.choice([0, 1, 3, 1 << 33])
        else:
            m.graph.initializer.remove(t)
    elif kind == 4 and len(nodes) > 1:
        i, j = rnd.randrange(len(nodes)), rnd.randrange(len(nodes))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(nodes[i])
        b.CopyFrom(nodes[j])
        nodes[i].CopyFrom(b)
        nodes[j].CopyFrom(a)
    elif kind == 5 and m.graph.input:
        d = m.graph.input[0].type.tensor_type.shape.dim
        if d:
            d[rnd.randrange(len(d))].dim_value = rnd.choice([0, 1, 2, 1 << 34])
    elif kind == 6:
        m.opset_import[0].version = rnd.choice([1, 5, 9, 13, 30, 1000])
    data = bytearray(m.SerializeToString())
    if kind >= 7 and data:
        for _ in range(rnd.randint(1, 8)):
            op = rnd.randrange(3)
            pos = rnd.randrange(len(data))
            if op == 0:
                data[pos] = rnd.randrange(256)
            elif op == 1:
                del data[pos:pos + rnd.randint(1, 16)]
            else:
                data[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
            if not data:
                break
    return bytes(data)


class _Hang(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Hang(f"no result within {CASE_TIMEOUT_S}s")


def check_one(data: bytes, rnd: random.Random) -> str | None:
    """Import (and, when small, build and run) one blob; returns a finding or None."""
    import nnvm
    from nnvm.errors import NNVMError

    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        graph, params = nnvm.frontend.from_onnx(data, check=rnd.random() < 0.3)
        shapes = graph.attrs.get("shape_inputs", {})
        feed_names = [n for n in graph.index.input_names if n not in params]
        if all(n in shapes for n in feed_names) and all(
                int(np.prod(shapes[n])) <= _MAX_RUN_ELEMENTS for n in feed_names):
            lib = nnvm.compiler.build(graph, target="reference", params=params)
            feed = {}
            for n in lib.input_names:
                dt = lib.input_dtypes.get(n) or "float32"
                feed[n] = np.asarray(rnd.random() * np.ones(shapes[n])).astype(dt)
            lib.run(**feed)
        STATS["ok"] += 1
        return None
    except NNVMError:
        STATS["nnvm_error"] += 1
        return None
    except _Hang as exc:
        return f"hang: {exc}"
    except BaseException as exc:  # noqa: BLE001 - every other exception is a finding
        if isinstance(exc, KeyboardInterrupt):
            raise
        return "".join(traceback.format_exception_only(type(exc), exc)).strip() + "\n" + \
            "".join(traceback.format_tb(exc.__traceback__)[-3:])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def fuzz(cases: int, seed: int, time_budget_s: float | None = None, verbose: bool = False
         ) -> list[tuple[int, str]]:
    """Run ``cases`` mutations (within ``time_budget_s``); returns [(case seed, finding)]."""
    import warnings

    models = seed_models()
    findings = []
    start = time.time()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for i in range(cases):
            if time_budget_s is not None and time.time() - start > time_budget_s:
                break
            case_seed = seed * 1_000_003 + i
            rnd = random.Random(case_seed)
            if rnd.random() < 0.1:
                data = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 600)))
            else:
                data = mutate(rnd.choice(models), rnd)
            finding = check_one(data, rnd)
            if finding is not None:
                findings.append((case_seed, finding))
                if verbose:
                    print(f"case seed {case_seed}: {finding}", flush=True)
    return findings


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-budget", type=float, default=None, help="seconds")
    args = p.parse_args(argv)
    t0 = time.time()
    findings = fuzz(args.cases, args.seed, args.time_budget, verbose=True)
    print(f"{len(findings)} finding(s) in {time.time() - t0:.0f}s; outcomes {STATS}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
