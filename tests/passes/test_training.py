"""End to end: an MLP trained by SGD with Gradient + _assign + OrderMutation on `reference`."""

from __future__ import annotations

import numpy as np

import nnvm
from nnvm import sym
from nnvm.compiler import graph_util
from nnvm.ir import Graph


def _mlp_loss():
    x, label = sym.Variable("x"), sym.Variable("label")
    h = sym.relu(sym.dense(x, units=16, name="fc1"))
    logits = sym.dense(h, units=3, name="fc2")
    loss = sym.mean(sym.sum(label * sym.log_softmax(logits), axis=1)) * -1.0
    return loss


def _blobs(rng, n=96):
    centers = np.array([[2.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 2.0, 0]])
    y = rng.integers(0, 3, n)
    x = centers[y] + rng.standard_normal((n, 4)) * 0.7
    return x.astype("float32"), np.eye(3, dtype="float32")[y]


def _train_graph(loss, lr: float) -> tuple[Graph, list[str]]:
    """Outputs: loss, then assign(w, w - lr * dw) per weight, ordered by OrderMutation."""
    weights = [v for v in loss.list_input_variables() if v.name not in ("x", "label")]
    grads = graph_util.gradients(loss, weights)
    updates = [sym.assign(w, w - g * lr) for w, g in zip(weights, grads)]
    graph = Graph(sym.Group([loss] + updates).outputs).apply("OrderMutation")
    return graph, [w.name for w in weights]


def test_sgd_with_assign_reduces_the_loss(rng):
    loss = _mlp_loss()
    graph, names = _train_graph(loss, lr=0.5)
    assert graph.attrs["num_mutation_deps"] > 0
    x, label = _blobs(rng)
    shapes = {"x": x.shape, "label": label.shape}
    lib = nnvm.compiler.build(graph, target="reference", shape=shapes)
    params = {"fc1_weight": rng.standard_normal((16, 4)) * 0.3, "fc1_bias": np.zeros(16),
              "fc2_weight": rng.standard_normal((3, 16)) * 0.3, "fc2_bias": np.zeros(3)}
    params = {k: v.astype("float32") for k, v in params.items()}
    losses = []
    for _ in range(40):
        out = lib.run(x=x, label=label, **params)
        losses.append(float(out[0]))
        # the interpreter has no variable state: write the assigned values back
        params = dict(zip(names, out[1:]))
    assert losses[-1] < 0.3 * losses[0], losses
    accuracy = _accuracy(loss, params, x, label)
    assert accuracy > 0.9


def _accuracy(loss, params, x, label) -> float:
    logits = loss.get_internals()["fc2_output"]
    lib = nnvm.compiler.build(logits, target="reference", shape={"x": x.shape}, params=params)
    (out,) = lib.run(x=x)
    return float(np.mean(out.argmax(1) == label.argmax(1)))


def test_training_graph_with_sublinear_memory_gives_the_same_updates(rng):
    loss = _mlp_loss()
    x, label = _blobs(rng, 16)
    weights = [v for v in loss.list_input_variables() if v.name not in ("x", "label")]
    feed = {"x": x, "label": label,
            "fc1_weight": rng.standard_normal((16, 4)).astype("float32"),
            "fc1_bias": np.zeros(16, "float32"),
            "fc2_weight": rng.standard_normal((3, 16)).astype("float32"),
            "fc2_bias": np.zeros(3, "float32")}
    results = []
    for option in (False, True):
        with nnvm.compiler.build_config(sublinear_memory=option):
            grads = graph_util.gradients(loss, weights)
        mirrored = [n for n in Graph(sym.Group(grads).outputs).index.nodes
                    if n.name.endswith("_mirror")]
        assert bool(mirrored) == option
        lib = nnvm.compiler.build(sym.Group(grads), target="reference",
                                  shape={k: v.shape for k, v in feed.items()})
        results.append(lib.run(**feed))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
