"""``onnx.backend`` adapter: ``prepare(model, shape=..., dtype=...)`` (issue 17).

``prepare(model, shape=...)`` used to raise a raw ``TypeError`` (the shape reached
``nnvm.compiler.build`` twice). Now it compiles for that input signature at prepare time, as an
onnxruntime session does when created, and keywords the adapter owns are refused with a
clear NNVMError instead of colliding inside ``build``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from nnvm.errors import NNVMError
from nnvm_onnx.backend import Backend, prepare
from onnx_test_helpers import ort_run

MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models",
                     "digits_mlp.onnx")


def test_prepare_with_shape_compiles_up_front_and_matches_onnxruntime(rng):
    import onnx

    model = onnx.load(MODEL)
    rep = prepare(model, shape={"data": (3, 64)}, target="reference")
    assert len(rep._cache) == 1  # compiled at prepare, not on the first run
    x = rng.standard_normal((3, 64)).astype("float32")
    (got,) = rep.run([x])
    assert len(rep._cache) == 1  # the first run used that module
    (want,) = ort_run(model, {"data": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (got2,) = rep.run([x[:1]])  # another batch: the symbolic-batch module, built once
    np.testing.assert_allclose(got2, want[:1], rtol=1e-5, atol=1e-5)
    (got3,) = rep.run([x[:2]])
    np.testing.assert_allclose(got3, want[:2], rtol=1e-5, atol=1e-5)
    assert len(rep._cache) == 1 and rep.builds == 2


def test_prepare_with_shape_and_build_options_through_backend_class():
    rep = Backend.prepare(MODEL, "CPU", target="reference", shape={"data": [1, 64]},
                          dtype="float32", opt_level=0)
    assert rep.opt_level == 0 and len(rep._cache) == 1


@pytest.mark.parametrize("kwargs, match", [
    (dict(shape={"x": (1, 64)}), r"names x, not a model input.*every model input: data"),
    (dict(shape={"data": (1, 64)}, dtype={"data": "float99"}),
     r"input 'data': bad shape or dtype"),
    (dict(params={}), r"option\(s\) params cannot be passed through"),
    (dict(dtype="float32", shape={"data": (1, 64)}, log=print), r"option\(s\) log"),
])
def test_prepare_bad_keywords_are_nnvm_errors(kwargs, match):
    with pytest.raises(NNVMError, match=match):
        prepare(MODEL, target="reference", **kwargs)
