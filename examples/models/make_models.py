"""Write the small models bundled with the examples (run once; the outputs are checked in).

``digits_mlp``: a 64-32-10 multilayer perceptron trained with scikit-learn on its bundled 8x8
handwritten-digits data set (no download), with a fixed seed. Written three ways:

- ``digits_mlp.json`` + ``digits_mlp.params``: NNVM graph JSON and the NNVM/TVM param dict,
  built with the symbol API (what ``examples/demo.py`` loads with only nnvm-core installed);
- ``digits_mlp.onnx``: the same network and weights as ONNX (Gemm, Relu, Gemm, Softmax), which
  the demo prefers when an ONNX frontend plugin is installed and available;
- ``digits_mlp.samples.npz``: 32 held-out images (``data``, float32 scaled to [0, 1]) and their
  labels (``label``), the demo's inputs.

Needs numpy, scikit-learn and nnvm-core (onnx optional). Usage: ``hatch run make-models``.
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np

import nnvm
from nnvm import sym

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0
HIDDEN = 32
NUM_SAMPLES = 32


def train_digits_mlp():
    """Train the MLP; returns ``(params, x_test, y_test)`` with NNVM-layout weights."""
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=SEED, stratify=digits.target)
    clf = MLPClassifier(hidden_layer_sizes=(HIDDEN,), activation="relu", max_iter=400,
                        random_state=SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x_train, y_train)
    print(f"digits_mlp: held-out accuracy (scikit-learn) {clf.score(x_test, y_test):.3f}")
    # dense weights are (units, in_dim) in NNVM; scikit-learn stores (in_dim, units)
    params = {"fc1_weight": clf.coefs_[0].T, "fc1_bias": clf.intercepts_[0],
              "fc2_weight": clf.coefs_[1].T, "fc2_bias": clf.intercepts_[1]}
    params = {k: np.ascontiguousarray(v, dtype="float32") for k, v in params.items()}
    return params, x_test[:NUM_SAMPLES], y_test[:NUM_SAMPLES].astype("int64")


def digits_mlp_symbol() -> sym.Symbol:
    """data (N, 64) -> dense(32) -> relu -> dense(10) -> softmax: class probabilities."""
    data = sym.Variable("data")
    hidden = sym.relu(sym.dense(data, units=HIDDEN, name="fc1"), name="relu1")
    return sym.softmax(sym.dense(hidden, units=10, name="fc2"), axis=-1, name="prob")


def digits_mlp_onnx(params: dict) -> bytes:
    """The same network as an ONNX model (opset 13), weights as initializers."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Gemm", ["data", "fc1_weight", "fc1_bias"], ["fc1"], transB=1),
             helper.make_node("Relu", ["fc1"], ["relu1"]),
             helper.make_node("Gemm", ["relu1", "fc2_weight", "fc2_bias"], ["fc2"], transB=1),
             helper.make_node("Softmax", ["fc2"], ["prob"], axis=-1)]
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="nnvm-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=HERE, help="where to write the files")
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    params, x_test, y_test = train_digits_mlp()
    graph = nnvm.graph.create(digits_mlp_symbol())
    files = {"digits_mlp.json": graph.json().encode("utf-8"),
             "digits_mlp.params": nnvm.compiler.save_param_dict(params)}
    try:
        files["digits_mlp.onnx"] = digits_mlp_onnx(params)
    except ImportError:
        print("digits_mlp: onnx is not installed; skipping digits_mlp.onnx")
    for name, blob in files.items():
        with open(os.path.join(args.out_dir, name), "wb") as f:
            f.write(blob)
    np.savez_compressed(os.path.join(args.out_dir, "digits_mlp.samples.npz"), data=x_test,
                        label=y_test)
    for name in sorted(os.listdir(args.out_dir)):
        if name.startswith("digits_mlp"):
            print(f"  {name}: {os.path.getsize(os.path.join(args.out_dir, name))} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
