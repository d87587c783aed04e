"""Seeds of the ONNX fuzzer (scripts/fuzz_onnx.py): real small models with inputs that
import, build and run on ``reference`` unmutated.

The bundled ``examples/models/digits_mlp.onnx``, the model tests stored in the onnx wheel
(``pytorch-operator``, ``pytorch-converted``, ``simple``), the onnx node tests that pass on
``reference`` (those not in ``tests/frontend_onnx/node_ledger.txt``) and a few models built
here in the shapes exporters emit. Every input has a concrete shape, so no seed stops at the
importer for want of one (the old fuzzer's seeds did, 5 of 6).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import warnings

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: node-test seeds whose inputs are larger than this are left out (kept fast)
MAX_SEED_ELEMENTS = 1 << 20


@dataclasses.dataclass
class Seed:
    """A model and example inputs (one array per non-initializer graph input)."""

    name: str
    model: object
    feed: dict


def _graph_inputs(model) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _seed(name, model, arrays) -> Seed | None:
    """A Seed when every input is a plain tensor and the model has no sparse/external parts."""
    names = _graph_inputs(model)
    if len(arrays) != len(names) or not all(isinstance(a, np.ndarray) for a in arrays):
        return None
    if any(a.dtype.kind not in "biuf" for a in arrays):
        return None
    return Seed(name, model, dict(zip(names, arrays)))


def bundled_seeds() -> list[Seed]:
    import onnx

    path = os.path.join(_ROOT, "examples", "models", "digits_mlp.onnx")
    if not os.path.exists(path):
        return []
    samples = np.load(path.replace(".onnx", ".samples.npz"))
    model = onnx.load(path)
    return [Seed("digits_mlp", model, {"data": samples["data"][:4]})]


def wheel_seeds(kinds=("pytorch-operator", "pytorch-converted", "simple")) -> list[Seed]:
    """The onnx wheel's stored model tests (model.onnx + test_data_set_0/input_*.pb)."""
    import onnx
    from onnx import numpy_helper

    data_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    seeds = []
    for kind in kinds:
        for case in sorted(glob.glob(os.path.join(data_dir, kind, "test_*"))):
            path = os.path.join(case, "model.onnx")
            if not os.path.exists(path):
                continue
            arrays = []
            for f in sorted(glob.glob(os.path.join(case, "test_data_set_0", "input_*.pb"))):
                t = onnx.TensorProto()
                try:
                    with open(f, "rb") as fh:
                        t.ParseFromString(fh.read())
                    arrays.append(numpy_helper.to_array(t))
                except Exception:  # noqa: BLE001 - a sequence/optional input: not a seed
                    arrays.append(None)
            s = _seed(f"{kind}/{os.path.basename(case)}", onnx.load(path), arrays)
            if s is not None:
                seeds.append(s)
    return seeds


def node_seeds() -> list[Seed]:
    """The onnx node tests that pass on ``reference`` (the node-suite ledger lists the rest)."""
    from onnx.backend.test.loader import load_model_tests

    ledger = os.path.join(_ROOT, "tests", "frontend_onnx", "node_ledger.txt")
    failing = set()
    if os.path.exists(ledger):
        with open(ledger, encoding="utf-8") as fh:
            failing = {ln.split()[0] for ln in fh if ln.strip() and not ln.startswith("#")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    seeds = []
    for c in sorted(cases, key=lambda c: c.name):
        if c.name in failing or not c.data_sets:
            continue
        s = _seed(f"node/{c.name}", c.model, list(c.data_sets[0][0]))
        if s is not None and sum(a.size for a in s.feed.values()) <= MAX_SEED_ELEMENTS:
            seeds.append(s)
    return seeds


def built_seeds() -> list[Seed]:
    """Small models in the shapes exporters emit, with static input shapes."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    H, F = helper.make_node, TensorProto.FLOAT

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    def model(name, nodes, inputs, outputs, inits, opset=17):
        g = helper.make_graph(nodes, name, inputs, outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m

    x = rng.standard_normal((2, 4)).astype(np.float32)
    mlp = model("mlp", [H("Gemm", ["x", "w1", "b1"], ["h"], transB=1), H("Relu", ["h"], ["r"]),
                        H("MatMul", ["r", "w2"], ["m"]), H("Softmax", ["m"], ["y"], axis=-1)],
                [helper.make_tensor_value_info("x", F, [2, 4])],
                [helper.make_tensor_value_info("y", F, [2, 3])],
                [w("w1", 8, 4), w("b1", 8), w("w2", 8, 3)])
    img = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    cnn = model("cnn", [
        H("Conv", ["img", "k", "kb"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
        H("BatchNormalization", ["c", "g", "bt", "mu", "var"], ["bn"], epsilon=1e-5),
        H("Relu", ["bn"], ["r"]), H("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        H("GlobalAveragePool", ["p"], ["gp"]), H("Flatten", ["gp"], ["f"], axis=1),
        H("Gemm", ["f", "fw", "fb"], ["y"], transB=1)],
        [helper.make_tensor_value_info("img", F, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, [1, 5])],
        [w("k", 4, 3, 3, 3), w("kb", 4), w("g", 4), w("bt", 4), w("mu", 4),
         numpy_helper.from_array(np.ones(4, np.float32), "var"), w("fw", 5, 4), w("fb", 5)])
    seq = rng.standard_normal((2, 5, 8)).astype(np.float32)
    attn = model("attention", [
        H("MatMul", ["s", "wq"], ["q"]), H("MatMul", ["s", "wk"], ["k"]),
        H("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), H("MatMul", ["q", "kt"], ["a"]),
        H("Div", ["a", "scale"], ["as"]), H("Softmax", ["as"], ["p"], axis=-1),
        H("MatMul", ["p", "s"], ["o"]),
        H("LayerNormalization", ["o", "lg", "lb"], ["y"], axis=-1, epsilon=1e-5)],
        [helper.make_tensor_value_info("s", F, [2, 5, 8])],
        [helper.make_tensor_value_info("y", F, [2, 5, 8])],
        [w("wq", 8, 8), w("wk", 8, 8), numpy_helper.from_array(np.float32(2.8), "scale"),
         w("lg", 8), w("lb", 8)])
    return [Seed("built/mlp", mlp, {"x": x}), Seed("built/cnn", cnn, {"img": img}),
            Seed("built/attention", attn, {"s": seq})]


#: stored models that do not import on purpose (an unsupported op or legacy semantics); the
#: seed test asserts that every other seed imports, builds and runs
NOT_SEEDS = {
    "pytorch-converted/test_PReLU_1d_multiparam": "opset-6 PRelu: 1-D slope over channels",
    "pytorch-converted/test_PReLU_2d_multiparam": "opset-6 PRelu: 1-D slope over channels",
    "pytorch-converted/test_PReLU_3d_multiparam": "opset-6 PRelu: 1-D slope over channels",
    "simple/test_gradient_of_add": "training op ai.onnx.preview.training.Gradient",
    "simple/test_gradient_of_add_and_mul": "training op ai.onnx.preview.training.Gradient",
}


def load_seeds(node_tests: bool = True) -> list[Seed]:
    seeds = bundled_seeds() + built_seeds() + wheel_seeds()
    seeds = [s for s in seeds if s.name not in NOT_SEEDS]
    return seeds + (node_seeds() if node_tests else [])


def attribute_pool(seeds: list[Seed]) -> dict:
    """{(op_type, attribute name): [AttributeProto, ...]}: values real models use, so that
    a mutation can give an op a value its kind of model would plausibly have."""
    pool: dict = {}
    for s in seeds:
        for n in s.model.graph.node:
            for a in n.attribute:
                if a.type in (a.GRAPH, a.GRAPHS):
                    continue
                vals = pool.setdefault((n.op_type, a.name), [])
                if len(vals) < 24 and all(v != a for v in vals):
                    vals.append(a)
    return pool
