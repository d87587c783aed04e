"""Symbol-built model families for tests and benchmarks: MLP, small CNN, MobileNet-style,
YOLO-style detector and BERT-style encoder.

Each builder returns ``(symbol, params, input_shapes)``: ``params`` holds deterministic random
values for every input but the data (batch-norm variances positive, so the graph is a valid
inference graph), ``input_shapes`` the data inputs' shapes. They are small by default so the
reference interpreter runs them in milliseconds, and scale with their arguments.
"""

from __future__ import annotations

import numpy as np

from .. import symbol as sym
from ..compiler.graph_util import infer_shape


def _params(net, input_shapes: dict, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes, _ = infer_shape(net, **input_shapes)
    params = {}
    for name, shape in zip(net.list_input_names(), shapes):
        if name in input_shapes:
            continue
        if name.endswith(("_moving_var", "_gamma")):
            v = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(("_beta", "_moving_mean", "_bias")):
            v = rng.uniform(-0.1, 0.1, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            v = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
        params[name] = v.astype("float32")
    return params


def _conv_bn(x, channels, kernel, name, strides=(1, 1), groups=1, act="relu"):
    pad = (kernel // 2, kernel // 2)
    y = sym.conv2d(x, channels=channels, kernel_size=(kernel, kernel), strides=strides,
                   padding=pad, groups=groups, use_bias=False, name=f"{name}_conv")
    y = sym.batch_norm(y, name=f"{name}_bn")
    if act == "relu":
        return sym.relu(y, name=f"{name}_relu")
    if act == "relu6":
        return sym.clip(y, a_min=0.0, a_max=6.0, name=f"{name}_relu6")
    return sym.leaky_relu(y, alpha=0.1, name=f"{name}_leaky")


def mlp(batch: int = 4, in_dim: int = 32, hidden: tuple[int, ...] = (64, 64),
        classes: int = 10, seed: int = 0):
    """dense -> relu stacks -> dense -> softmax."""
    x = sym.Variable("data")
    y = x
    for i, h in enumerate(hidden):
        y = sym.relu(sym.dense(y, units=h, name=f"fc{i}"), name=f"relu{i}")
    y = sym.softmax(sym.dense(y, units=classes, name="fc_out"), name="prob")
    shapes = {"data": (batch, in_dim)}
    return y, _params(y, shapes, seed), shapes


def small_cnn(batch: int = 1, image: int = 16, classes: int = 10, seed: int = 0):
    """Two conv-bn-relu blocks with max pooling, a residual add, flatten, dense."""
    x = sym.Variable("data")
    y = _conv_bn(x, 8, 3, "b1")
    y = sym.max_pool2d(y, pool_size=(2, 2), strides=(2, 2), name="pool1")
    z = _conv_bn(y, 8, 3, "b2")
    y = sym.relu(z + y, name="res_relu")
    y = sym.dense(sym.flatten(y), units=classes, name="fc")
    shapes = {"data": (batch, 3, image, image)}
    return y, _params(y, shapes, seed), shapes


def mobilenet(batch: int = 1, image: int = 32, width: int = 8, classes: int = 10,
              num_blocks: int = 3, seed: int = 0):
    """MobileNet-v1 style: depthwise 3x3 + pointwise 1x1 blocks with bn and relu6,
    global average pooling, dense."""
    x = sym.Variable("data")
    y = _conv_bn(x, width, 3, "stem", strides=(2, 2), act="relu6")
    c = width
    for i in range(num_blocks):
        y = _conv_bn(y, c, 3, f"dw{i}", strides=(2, 2) if i % 2 else (1, 1), groups=c,
                     act="relu6")
        c *= 2
        y = _conv_bn(y, c, 1, f"pw{i}", act="relu6")
    y = sym.flatten(sym.global_avg_pool2d(y, name="gap"))
    y = sym.softmax(sym.dense(y, units=classes, name="fc"), name="prob")
    shapes = {"data": (batch, 3, image, image)}
    return y, _params(y, shapes, seed), shapes


def _upsample2x(x, shape):
    """Nearest-neighbour 2x upsampling from injective ops (no dedicated op needed)."""
    n, c, h, w = shape
    y = sym.reshape(x, shape=(n, c, h, 1, w, 1))
    y = sym.broadcast_to(y, shape=(n, c, h, 2, w, 2))
    return sym.reshape(y, shape=(n, c, 2 * h, 2 * w))


def yolo(batch: int = 1, image: int = 32, width: int = 8, num_anchors: int = 3,
         num_classes: int = 4, seed: int = 0):
    """YOLOv3-tiny style detector: conv-bn-leaky backbone with pooling, two detection heads
    at two scales, the coarse one upsampled and concatenated into the fine one."""
    x = sym.Variable("data")
    y = _conv_bn(x, width, 3, "c1", act="leaky")
    y = sym.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = _conv_bn(y, width * 2, 3, "c2", act="leaky")
    y = sym.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    route = _conv_bn(y, width * 4, 3, "c3", act="leaky")
    y = sym.max_pool2d(route, pool_size=(2, 2), strides=(2, 2))
    y = _conv_bn(y, width * 8, 3, "c4", act="leaky")
    out_ch = num_anchors * (5 + num_classes)
    head1 = sym.conv2d(_conv_bn(y, width * 4, 1, "h1a", act="leaky"), channels=out_ch,
                       kernel_size=(1, 1), name="head1")
    s = image // 8
    up = _upsample2x(_conv_bn(y, width * 2, 1, "up", act="leaky"), (batch, width * 2, s, s))
    y = sym.concatenate(up, route, axis=1, name="route_cat")
    y = _conv_bn(y, width * 4, 3, "h2a", act="leaky")
    head2 = sym.conv2d(y, channels=out_ch, kernel_size=(1, 1), name="head2")
    outs = [sym.sigmoid(head1, name="det1"), sym.sigmoid(head2, name="det2")]
    net = sym.Group(outs)
    shapes = {"data": (batch, 3, image, image)}
    return net, _params(net, shapes, seed), shapes


def _layer_norm(x, dim, name):
    """Layer norm decomposed: mean, subtract, mean of squares, sqrt, scale and shift."""
    mu = sym.mean(x, axis=(-1,), keepdims=True, name=f"{name}_mean")
    d = x - mu
    var = sym.mean(d * d, axis=(-1,), keepdims=True, name=f"{name}_var")
    y = d / sym.sqrt(var + 1e-5)
    return y * sym.Variable(f"{name}_gamma", shape=(dim,)) + sym.Variable(f"{name}_beta",
                                                                 shape=(dim,))


def _gelu(x):
    """tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = (x + (x * x * x) * 0.044715) * float(np.sqrt(2 / np.pi))
    return x * 0.5 * (sym.tanh(inner) + 1.0)


def bert(batch: int = 1, seq: int = 8, hidden: int = 32, heads: int = 4, layers: int = 2,
         seed: int = 0):
    """BERT-style encoder: self-attention (dense q/k/v, batched matmul, softmax), residuals,
    decomposed layer norm and a gelu feed-forward; input is embedded tokens (batch, seq,
    hidden)."""
    x = sym.Variable("data")
    hd = hidden // heads
    y = x
    for i in range(layers):
        p = f"l{i}"
        flat = sym.reshape(y, shape=(batch * seq, hidden))

        def proj(kind, flat=flat, p=p):
            t = sym.dense(flat, units=hidden, name=f"{p}_{kind}")
            t = sym.reshape(t, shape=(batch, seq, heads, hd))
            return sym.transpose(t, axes=(0, 2, 1, 3))

        q, k, v = proj("q"), proj("k"), proj("v")
        scores = sym.matmul(q, k, transpose_b=True) * float(1 / np.sqrt(hd))
        att = sym.matmul(sym.softmax(scores, axis=-1), v)
        att = sym.reshape(sym.transpose(att, axes=(0, 2, 1, 3)), shape=(batch * seq, hidden))
        att = sym.dense(att, units=hidden, name=f"{p}_out")
        y = _layer_norm(flat + att, hidden, f"{p}_ln1")
        ff = sym.dense(_gelu(sym.dense(y, units=hidden * 4, name=f"{p}_ff1")), units=hidden,
                       name=f"{p}_ff2")
        y = sym.reshape(_layer_norm(y + ff, hidden, f"{p}_ln2"), shape=(batch, seq, hidden))
    shapes = {"data": (batch, seq, hidden)}
    net = y
    params = _params(net, shapes, seed)
    return net, params, shapes


#: name -> builder, for benchmarks and parametrised tests.
MODELS = {"mlp": mlp, "small_cnn": small_cnn, "mobilenet": mobilenet, "yolo": yolo,
          "bert": bert}
