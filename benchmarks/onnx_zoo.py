"""Export-style ONNX models at the sizes of issue 5, built in code (no downloads).

Each builder returns ``(ModelProto, feed)``: the graph looks like what a real exporter emits
(decomposed activations and norms, Shape/Gather/Concat batch arithmetic, Resize upsampling,
ONNX LSTM with state inputs), at the sizes the issue measures:

* ``yolo``: a YOLOv8n-class detector (SiLU convs, C2f-style split/concat blocks, SPPF,
  FPN with nearest Resize, three 1x1 heads, reshape + transpose + sigmoid decode), 320x320;
* ``ocr``: a MobileNetV3-backbone text detector (hard-swish convs, inverted residuals with
  depthwise 3x3/5x5 convs and squeeze-excite, DB-style FPN head, ConvTranspose upsampler,
  sigmoid probability map), 640x640;
* ``bert``: a 6-layer BERT sentence encoder (MiniLM-L6 sizes: d=384, 12 heads, ff=1536;
  decomposed LayerNorm, erf GELU, additive attention mask), 128 tokens;
* ``vad``: one step of a small LSTM voice-activity model (framed audio, a learned filter
  bank MatMul, LSTM hidden 64 with state in/out, Gemm head, Sigmoid).

Weights are random (seeded), scaled so activations stay O(1) and outputs can be compared.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

H = helper.make_node
F32 = TensorProto.FLOAT


class _Builder:
    """Accumulates nodes and initializers; names are generated from a prefix."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def const(self, prefix: str, array) -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, prefix: str, shape, fan_in: int, gain: float = 1.0) -> str:
        w = self.rng.standard_normal(shape) * gain / np.sqrt(max(fan_in, 1))
        return self.const(prefix, w.astype(np.float32))

    def op(self, op_type: str, inputs, n_out: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(H(op_type, list(inputs), outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, inputs, outputs, name: str, opset: int = 17):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="nnvm-bench")
        model.ir_version = 8
        return model


# -- convolution helpers (what torch.onnx emits after BN folding) -----------------------------

def _conv(b: _Builder, x, cin, cout, k=3, s=1, groups=1, act="silu", bias=True):
    w = b.weight("w", (cout, cin // groups, k, k), cin // groups * k * k, gain=1.4)
    ins = [x, w] + ([b.const("b", (b.rng.standard_normal(cout) * 0.05).astype(np.float32))]
                    if bias else [])
    y = b.op("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4,
             group=groups)
    if act == "silu":  # x * sigmoid(x): two nodes, as exported
        return b.op("Mul", [y, b.op("Sigmoid", [y])])
    if act == "hswish":  # x * HardSigmoid(x)
        return b.op("Mul", [y, b.op("HardSigmoid", [y], alpha=1.0 / 6, beta=0.5)])
    if act == "relu":
        return b.op("Relu", [y])
    return y


def yolo_model(rng, size: int = 320, width=(16, 32, 64, 128, 256), classes: int = 80):
    """YOLOv8n-class detector; output ``(1, 4 + classes, anchors)`` like an exported head."""
    b = _Builder(rng)

    def c2f(x, c, n=1, shortcut=True):
        y = _conv(b, x, c, c, k=1)
        y1, y2 = b.op("Split", [y, b.const("split", np.array([c // 2, c // 2]))], n_out=2,
                      axis=1)
        outs, cur = [y1, y2], y2
        for _ in range(n):
            t = _conv(b, _conv(b, cur, c // 2, c // 2), c // 2, c // 2)
            cur = b.op("Add", [cur, t]) if shortcut else t
            outs.append(cur)
        return _conv(b, b.op("Concat", outs, axis=1), (2 + n) * c // 2, c, k=1)

    c0, c1, c2, c3, c4 = width
    x = _conv(b, "images", 3, c0, s=2)
    x = c2f(_conv(b, x, c0, c1, s=2), c1)
    p3 = c2f(_conv(b, x, c1, c2, s=2), c2, n=2)
    p4 = c2f(_conv(b, p3, c2, c3, s=2), c3, n=2)
    x = c2f(_conv(b, p4, c3, c4, s=2), c4)
    # SPPF: three chained 5x5 max pools, concatenated
    y = _conv(b, x, c4, c4 // 2, k=1)
    m1 = b.op("MaxPool", [y], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])
    m2 = b.op("MaxPool", [m1], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])
    m3 = b.op("MaxPool", [m2], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])
    p5 = _conv(b, b.op("Concat", [y, m1, m2, m3], axis=1), 2 * c4, c4, k=1)
    scales = b.const("scales", np.array([1, 1, 2, 2], dtype=np.float32))
    up = b.op("Resize", [p5, "", scales], mode="nearest")
    n4 = c2f(b.op("Concat", [up, p4], axis=1), c4 + c3, shortcut=False)
    n4 = _conv(b, n4, c4 + c3, c3, k=1)
    up = b.op("Resize", [n4, "", scales], mode="nearest")
    n3 = _conv(b, c2f(b.op("Concat", [up, p3], axis=1), c3 + c2, shortcut=False), c3 + c2,
               c2, k=1)
    heads = []
    no = 4 + classes
    for feat, c in ((n3, c2), (n4, c3), (p5, c4)):
        h = _conv(b, _conv(b, feat, c, c), c, no, k=1, act=None)
        s = b.op("Shape", [h])
        batch = b.op("Gather", [s, b.const("zero", np.array([0], dtype=np.int64))], axis=0)
        newshape = b.op("Concat", [batch, b.const("tail", np.array([no, -1], dtype=np.int64))],
                        axis=0)
        heads.append(b.op("Reshape", [h, newshape]))
    cat = b.op("Concat", heads, axis=2)
    box, cls = b.op("Split", [cat, b.const("split", np.array([4, classes]))], n_out=2, axis=1)
    out = b.op("Concat", [box, b.op("Sigmoid", [cls])], axis=1)
    b.nodes.append(H("Identity", [out], ["output0"]))
    model = b.model([helper.make_tensor_value_info("images", F32, ["batch", 3, size, size])],
                    [helper.make_tensor_value_info("output0", F32, [None] * 3)], "yolo_class")
    feed = {"images": rng.random((1, 3, size, size), dtype=np.float32)}
    return model, feed


def ocr_model(rng, size: int = 640):
    """MobileNetV3-small-style backbone (x0.5) + DB-style head producing a probability map."""
    b = _Builder(rng)

    def se(x, c):
        r = max(8, c // 4)
        g = b.op("GlobalAveragePool", [x])
        g = _conv(b, g, c, r, k=1, act="relu")
        g = _conv(b, g, r, c, k=1, act=None)
        return b.op("Mul", [x, b.op("HardSigmoid", [g], alpha=1.0 / 6, beta=0.5)])

    def block(x, cin, exp, cout, k, s, use_se, act):
        y = _conv(b, x, cin, exp, k=1, act=act) if exp != cin else x
        y = _conv(b, y, exp, exp, k=k, s=s, groups=exp, act=act)
        if use_se:
            y = se(y, exp)
        y = _conv(b, y, exp, cout, k=1, act=None)
        return b.op("Add", [x, y]) if s == 1 and cin == cout else y

    # (kernel, expansion, out, SE, activation, stride): MobileNetV3-small, width 0.5
    cfg = [(3, 8, 8, True, "relu", 2),
           (3, 40, 16, False, "relu", 2), (3, 48, 16, False, "relu", 1),
           (5, 48, 24, True, "hswish", 2), (5, 120, 24, True, "hswish", 1),
           (5, 120, 24, True, "hswish", 1), (5, 64, 24, True, "hswish", 1),
           (5, 72, 24, True, "hswish", 1),
           (5, 144, 48, True, "hswish", 2), (5, 288, 48, True, "hswish", 1),
           (5, 288, 48, True, "hswish", 1)]
    x = _conv(b, "x", 3, 8, s=2, act="hswish")
    cin, feats = 8, []
    for i, (k, exp, cout, use_se, act, s) in enumerate(cfg):
        if s == 2 and i > 0:
            feats.append((x, cin))
        x = block(x, cin, exp, cout, k, s, use_se, act)
        cin = cout
    feats.append((x, cin))
    inner = 48
    lat = [_conv(b, f, c, inner, k=1, act=None, bias=False) for f, c in feats]
    scales = b.const("scales", np.array([1, 1, 2, 2], dtype=np.float32))
    top = lat[-1]
    outs = [top]
    for lateral in reversed(lat[:-1]):
        top = b.op("Add", [lateral, b.op("Resize", [top, "", scales], mode="nearest")])
        outs.append(top)
    # each level -> inner/4 channels, upsampled to 1/4 resolution and concatenated
    fused = []
    for level, f in enumerate(reversed(outs)):
        p = _conv(b, f, inner, inner // 4, act=None, bias=False)
        if level:
            p = b.op("Resize", [p, "", b.const("up", np.array(
                [1, 1, 2 ** level, 2 ** level], dtype=np.float32))], mode="nearest")
        fused.append(p)
    y = _conv(b, b.op("Concat", fused, axis=1), inner, inner // 4, act="relu")
    wt = b.weight("wt", (inner // 4, inner // 4, 2, 2), inner // 4 * 4, gain=1.4)
    y = b.op("Relu", [b.op("ConvTranspose", [y, wt, b.const("bt", np.zeros(inner // 4,
                                                                           np.float32))],
                           kernel_shape=[2, 2], strides=[2, 2])])
    wt2 = b.weight("wt", (inner // 4, 1, 2, 2), inner // 4 * 4)
    y = b.op("ConvTranspose", [y, wt2], kernel_shape=[2, 2], strides=[2, 2])
    b.nodes.append(H("Sigmoid", [y], ["maps"]))
    model = b.model([helper.make_tensor_value_info("x", F32, ["batch", 3, size, size])],
                    [helper.make_tensor_value_info("maps", F32, [None] * 4)], "ocr_det_mbv3")
    feed = {"x": rng.random((1, 3, size, size), dtype=np.float32)}
    return model, feed


def bert_model(rng, layers: int = 6, seq: int = 128, d: int = 384, heads: int = 12,
               ff: int = 1536, vocab: int = 30522):
    """BERT/MiniLM-style sentence encoder as exported by torch.onnx (opset 13)."""
    b = _Builder(rng)
    dh = d // heads

    def layer_norm(x):
        mean = b.op("ReduceMean", [x], axes=[-1])
        c = b.op("Sub", [x, mean])
        var = b.op("ReduceMean", [b.op("Pow", [c, b.const("two", np.float32(2.0))])],
                   axes=[-1])
        std = b.op("Sqrt", [b.op("Add", [var, b.const("eps", np.float32(1e-12))])])
        n = b.op("Div", [c, std])
        gamma = b.const("gamma", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32))
        beta = b.const("beta", (0.1 * rng.standard_normal(d)).astype(np.float32))
        return b.op("Add", [b.op("Mul", [n, gamma]), beta])

    def linear(x, n_in, n_out):
        w = b.weight("w", (n_in, n_out), n_in)
        bias = b.const("b", (0.02 * rng.standard_normal(n_out)).astype(np.float32))
        return b.op("Add", [b.op("MatMul", [x, w]), bias])

    word = b.const("word_emb", (0.5 * rng.standard_normal((vocab, d))).astype(np.float32))
    pos = b.const("pos_emb", (0.5 * rng.standard_normal((512, d))).astype(np.float32))
    ids_shape = b.op("Shape", ["input_ids"])
    seq_len = b.op("Gather", [ids_shape, b.const("one", np.array(1, np.int64))], axis=0)
    positions = b.op("Range", [b.const("zero", np.array(0, np.int64)), seq_len,
                               b.const("one", np.array(1, np.int64))])
    h = b.op("Add", [b.op("Gather", [word, "input_ids"], axis=0),
                     b.op("Gather", [pos, positions], axis=0)])
    x = layer_norm(h)
    mask = b.op("Unsqueeze", [b.op("Cast", ["attention_mask"], to=F32),
                              b.const("axes", np.array([1, 2], np.int64))])
    mask = b.op("Mul", [b.op("Sub", [b.const("onef", np.float32(1.0)), mask]),
                        b.const("neg", np.float32(-10000.0))])
    for _ in range(layers):
        shp = b.op("Shape", [x])
        bs = b.op("Slice", [shp, b.const("s0", np.array([0], np.int64)),
                            b.const("s2", np.array([2], np.int64))])
        split_shape = b.op("Concat", [bs, b.const("hd", np.array([heads, dh], np.int64))],
                           axis=0)
        qkv = []
        for name in "qkv":
            t = b.op("Reshape", [linear(x, d, d), split_shape])
            qkv.append(b.op("Transpose", [t], perm=[0, 2, 3, 1] if name == "k"
                            else [0, 2, 1, 3]))
        scores = b.op("Div", [b.op("MatMul", qkv[:2]),
                              b.const("scale", np.float32(np.sqrt(dh)))])
        probs = b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, qkv[2]])], perm=[0, 2, 1, 3])
        merged = b.op("Reshape", [ctx, b.op("Concat", [bs, b.const(
            "d", np.array([d], np.int64))], axis=0)])
        x = layer_norm(b.op("Add", [x, linear(merged, d, d)]))
        f = linear(x, d, ff)
        g = b.op("Div", [f, b.const("sqrt2", np.float32(np.sqrt(2.0)))])
        g = b.op("Add", [b.op("Erf", [g]), b.const("onef", np.float32(1.0))])
        g = b.op("Mul", [b.op("Mul", [f, g]), b.const("half", np.float32(0.5))])
        x = layer_norm(b.op("Add", [x, linear(g, ff, d)]))
    b.nodes.append(H("Identity", [x], ["last_hidden_state"]))
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
           for n in ("input_ids", "attention_mask")]
    model = b.model(ins, [helper.make_tensor_value_info("last_hidden_state", F32,
                                                         [None] * 3)],
                    "bert_encoder", opset=13)
    feed = {"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int64),
            "attention_mask": np.ones((1, seq), np.int64)}
    return model, feed


def vad_model(rng, frame: int = 512, bins: int = 129, hidden: int = 64):
    """One step of a small LSTM VAD: |filter bank| features -> LSTM(64) -> Gemm -> Sigmoid."""
    b = _Builder(rng)
    basis = b.weight("basis", (frame, 2 * bins), frame)
    spec = b.op("MatMul", ["input", basis])  # (1, 2*bins): re/im of a learned STFT
    re, im = b.op("Split", [spec, b.const("split", np.array([bins, bins]))], n_out=2, axis=1)
    mag = b.op("Sqrt", [b.op("Add", [b.op("Add", [b.op("Mul", [re, re]), b.op("Mul", [im, im])]),
                                     b.const("eps", np.float32(1e-6))])])
    feat = b.op("Log", [b.op("Add", [mag, b.const("one", np.float32(1.0))])])
    enc = b.op("Relu", [b.op("Add", [b.op("MatMul", [feat, b.weight("we", (bins, 64), bins)]),
                                     b.const("be", np.zeros(64, np.float32))])])
    seq = b.op("Unsqueeze", [enc, b.const("ax", np.array([0], np.int64))])  # (1, 1, 64)
    w = b.weight("W", (1, 4 * hidden, 64), 64)
    r = b.weight("R", (1, 4 * hidden, hidden), hidden)
    bias = b.const("B", (0.1 * rng.standard_normal((1, 8 * hidden))).astype(np.float32))
    b.nodes.append(H("LSTM", [seq, w, r, bias, "", "h", "c"], ["Y", "hn", "cn"],
                     hidden_size=hidden))
    y = b.op("Reshape", ["Y", b.const("last", np.array([-1, hidden], np.int64))])
    logit = b.op("Gemm", [y, b.weight("hw", (1, hidden), hidden),
                          b.const("hb", np.zeros(1, np.float32))], transB=1)
    b.nodes.append(H("Sigmoid", [logit], ["output"]))
    ins = [helper.make_tensor_value_info("input", F32, [1, frame]),
           helper.make_tensor_value_info("h", F32, [1, 1, hidden]),
           helper.make_tensor_value_info("c", F32, [1, 1, hidden])]
    outs = [helper.make_tensor_value_info(n, F32, [None] * r)
            for n, r in (("output", 2), ("hn", 3), ("cn", 3))]
    model = b.model(ins, outs, "lstm_vad", opset=16)
    feed = {"input": rng.standard_normal((1, frame)).astype(np.float32),
            "h": (0.1 * rng.standard_normal((1, 1, hidden))).astype(np.float32),
            "c": (0.1 * rng.standard_normal((1, 1, hidden))).astype(np.float32)}
    return model, feed


MODELS = {"yolo": yolo_model, "ocr": ocr_model, "bert": bert_model, "vad": vad_model}
