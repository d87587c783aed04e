"""Symbol-built models on target "reference" agree with a plain NumPy forward pass."""

import numpy as np

import nnvm
from nnvm import sym


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_mlp_matches_numpy(rng):
    x = sym.Variable("x")
    h = sym.relu(sym.dense(x, units=16, name="fc1"))
    y = sym.softmax(sym.dense(h, units=10, name="fc2"))
    params = {"fc1_weight": rng.standard_normal((16, 8)), "fc1_bias": rng.standard_normal(16),
              "fc2_weight": rng.standard_normal((10, 16)), "fc2_bias": rng.standard_normal(10)}
    params = {k: v.astype("float32") for k, v in params.items()}
    lib = nnvm.compiler.build(y, target="reference", shape={"x": (5, 8)}, params=params)
    a = rng.standard_normal((5, 8)).astype("float32")
    (out,) = lib.run(x=a)
    p = {k: v.astype(np.float64) for k, v in params.items()}
    hid = np.maximum(a @ p["fc1_weight"].T + p["fc1_bias"], 0)
    want = _softmax(hid @ p["fc2_weight"].T + p["fc2_bias"])
    assert out.dtype == np.float32 and out.shape == (5, 10)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-6)


def _np_conv3x3_same(x, w, b):
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(h):
        for j in range(wd):
            out[:, :, i, j] = np.einsum("ncij,ocij->no", xp[:, :, i:i + 3, j:j + 3], w)
    return out + b[None, :, None, None]


def test_small_cnn_matches_numpy(rng):
    d = sym.Variable("data")
    y = sym.conv2d(d, channels=4, kernel_size=(3, 3), padding=(1, 1), name="conv")
    y = sym.batch_norm(y, name="bn")
    y = sym.relu(y)
    y = sym.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = sym.flatten(y)
    y = sym.dropout(y, rate=0.5)
    y = sym.softmax(sym.dense(y, units=5, name="fc"))
    params = {"conv_weight": rng.standard_normal((4, 3, 3, 3)),
              "conv_bias": rng.standard_normal(4),
              "bn_gamma": rng.random(4) + 0.5, "bn_beta": rng.standard_normal(4),
              "bn_moving_mean": rng.standard_normal(4), "bn_moving_var": rng.random(4) + 0.5,
              "fc_weight": rng.standard_normal((5, 4 * 4 * 4)) * 0.3,
              "fc_bias": rng.standard_normal(5)}
    params = {k: v.astype("float32") for k, v in params.items()}
    lib = nnvm.compiler.build(y, target="reference", shape={"data": (2, 3, 8, 8)},
                              params=params)
    a = rng.standard_normal((2, 3, 8, 8)).astype("float32")
    (out,) = lib.run(data=a)

    p = {k: v.astype(np.float64) for k, v in params.items()}
    z = _np_conv3x3_same(a.astype(np.float64), p["conv_weight"], p["conv_bias"])
    c = lambda v: v[None, :, None, None]  # noqa: E731
    z = (z - c(p["bn_moving_mean"])) / np.sqrt(c(p["bn_moving_var"]) + 1e-5)
    z = np.maximum(z * c(p["bn_gamma"]) + c(p["bn_beta"]), 0)
    z = z.reshape(2, 4, 4, 2, 4, 2).max(axis=(3, 5))
    want = _softmax(z.reshape(2, -1) @ p["fc_weight"].T + p["fc_bias"])
    assert out.shape == (2, 5) and out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-6)


def test_cnn_with_avg_and_global_pool(rng):
    d = sym.Variable("data")
    y = sym.conv2d(d, channels=6, kernel_size=(3, 3), strides=(2, 2), groups=3, name="c")
    y = sym.avg_pool2d(y, pool_size=(2, 2), strides=(1, 1))
    y = sym.global_avg_pool2d(y)
    y = sym.log_softmax(sym.flatten(y))
    w = rng.standard_normal((6, 1, 3, 3)).astype("float32")
    b = np.zeros(6, "float32")
    lib = nnvm.compiler.build(y, target="reference", shape={"data": (1, 3, 9, 9)},
                              params={"c_weight": w, "c_bias": b})
    a = rng.standard_normal((1, 3, 9, 9)).astype("float32")
    (out,) = lib.run(data=a)
    conv = np.zeros((1, 6, 4, 4))
    for o in range(6):
        for i in range(4):
            for j in range(4):
                conv[0, o, i, j] = (a[0, o // 2, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[o, 0]).sum()
    pooled = (conv[..., :-1, :-1] + conv[..., 1:, :-1] + conv[..., :-1, 1:] + conv[..., 1:, 1:]) / 4
    z = pooled.mean(axis=(2, 3))
    want = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
