"""Recurrent layers with ONNX semantics: lstm, gru, rnn.

One record per layer; the kernel loops over time steps (batch and gates are vectorised).
ONNX details kept: gate orders (LSTM iofc, GRU zrh), per-direction activations with their
alpha/beta, ``clip`` on gate pre-activations, ``sequence_lens`` (steps past a sequence's
length output 0 and keep the state), ``layout`` 0 (time major) or 1 (batch major),
``input_forget`` and peepholes for LSTM, ``linear_before_reset`` for GRU. Optional ONNX
inputs are switched on by ``use_*`` attributes so the input list is fixed by the attributes.
"""

from __future__ import annotations

import numpy as np

from ..errors import AttrError, ShapeError
from ..op import OpPattern, OpSet
from ..params import Param

defs = OpSet("sequence")

#: ONNX activation name -> (fn(x, alpha, beta), default alpha, default beta, uses alpha/beta).
_ACTS = {
    "relu": (lambda x, a, b: np.maximum(x, 0), None, None),
    "tanh": (lambda x, a, b: np.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: 1.0 / (1.0 + np.exp(-x)), None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1)), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), None, None),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), None, None),
}
_DEFAULT_ACTS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh"),
                 "rnn": ("Tanh",)}
_GATES = {"lstm": 4, "gru": 3, "rnn": 1}


def _activations(kind, attrs, ndir):
    """One list of callables per direction, consuming alpha/beta in order as ONNX Runtime."""
    names = list(attrs["activations"]) or list(_DEFAULT_ACTS[kind]) * ndir
    per = len(_DEFAULT_ACTS[kind])
    if len(names) == per and ndir == 2:
        names = names * 2
    if len(names) != per * ndir:
        raise AttrError(f"{kind}: activations needs {per * ndir} names for {ndir} "
                        f"direction(s); got {names}")
    alphas, betas = list(attrs["activation_alpha"]), list(attrs["activation_beta"])
    fns = []
    for name in names:
        key = name.lower()
        if key not in _ACTS:
            raise AttrError(f"{kind}: unknown activation {name!r}; valid: "
                            f"{', '.join(sorted(_ACTS))}")
        fn, da, db = _ACTS[key]
        a = alphas.pop(0) if da is not None and alphas else da
        b = betas.pop(0) if db is not None and betas else db
        fns.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [fns[i * per:(i + 1) * per] for i in range(ndir)]


def rnn_input_names(kind):
    """``attrs -> [input name, ...]`` of an RNN/GRU/LSTM node (``kind``), optional inputs
    included only when their ``use_*`` flag is set: how kernel generators index inputs."""
    def names(attrs):
        out = ["X", "W", "R"]
        for flag, name in (("use_bias", "B"), ("use_sequence_lens", "sequence_lens"),
                           ("use_initial_h", "initial_h")):
            if attrs[flag]:
                out.append(name)
        if kind == "lstm":
            out += ["initial_c"] if attrs["use_initial_c"] else []
            out += ["P"] if attrs["use_peepholes"] else []
        return out
    return names


def _ndir(attrs):
    return 2 if attrs["direction"] == "bidirectional" else 1


def _shape_rule(kind):
    def rule(attrs, ins, outs):
        x = ins[0]
        if x is None:
            return ins, outs
        if len(x) != 3:
            raise ShapeError(f"{kind}: X must be 3-D; got {x}")
        seq, batch = (x[0], x[1]) if attrs["layout"] == 0 else (x[1], x[0])
        d, h, g = _ndir(attrs), attrs["hidden_size"], _GATES[kind]
        names = rnn_input_names(kind)(attrs)
        want = {"W": (d, g * h, x[2]), "R": (d, g * h, h), "B": (d, 2 * g * h),
                "sequence_lens": (batch,), "P": (d, 3 * h),
                "initial_h": (d, batch, h) if attrs["layout"] == 0 else (batch, d, h)}
        want["initial_c"] = want["initial_h"]
        new_ins = [x] + [want[n] for n in names[1:]]
        y = (seq, d, batch, h) if attrs["layout"] == 0 else (batch, seq, d, h)
        state = want["initial_h"]
        return new_ins, [y] + [state] * (len(outs) - 1)
    return rule


def _dtype_rule(kind):
    def rule(attrs, ins, outs):
        t = ins[0] or outs[0]
        names = rnn_input_names(kind)(attrs)
        new_ins = [("int32" if n == "sequence_lens" else t) if ins[i] is None else ins[i]
                   for i, n in enumerate(names)]
        return new_ins, [t] * len(outs)
    return rule


def _clip(attrs):
    c = attrs["clip"]
    return (lambda v: np.clip(v, -c, c)) if c and c > 0 else (lambda v: v)


def _run(kind, attrs, arrays):
    """The shared kernel: returns Y, Y_h (and Y_c for LSTM) in the op's layout."""
    names = rnn_input_names(kind)(attrs)
    v = dict(zip(names, arrays))
    x = v["X"]
    if attrs["layout"] == 1:
        x = x.transpose(1, 0, 2)
    seq, batch, _ = x.shape
    d, h, g = _ndir(attrs), attrs["hidden_size"], _GATES[kind]
    acc = np.float64
    xf = x.astype(acc)
    w, r = v["W"].astype(acc), v["R"].astype(acc)
    b = v["B"].astype(acc) if "B" in v else np.zeros((d, 2 * g * h))
    lens = v["sequence_lens"].astype(np.int64) if "sequence_lens" in v else \
        np.full(batch, seq, np.int64)

    def state(name):
        if name not in v:
            return np.zeros((d, batch, h))
        s = v[name].astype(acc)
        return s.transpose(1, 0, 2) if attrs["layout"] == 1 else s

    h0, c0 = state("initial_h"), state("initial_c")
    p = v["P"].astype(acc) if "P" in v else np.zeros((d, 3 * h))
    acts = _activations(kind, attrs, d)
    clip = _clip(attrs)
    y = np.zeros((seq, d, batch, h))
    yh, yc = np.zeros((d, batch, h)), np.zeros((d, batch, h))
    for k in range(d):
        reverse = attrs["direction"] == "reverse" or k == 1
        steps = range(seq - 1, -1, -1) if reverse else range(seq)
        wb, rb = b[k, :g * h], b[k, g * h:]
        xw = xf @ w[k].T + wb  # (seq, batch, g*h): the input projection of every step
        ht, ct = h0[k], c0[k]
        f = acts[k]
        for t in steps:
            live = (t < lens)[:, None]
            if kind == "lstm":
                gates = xw[t] + ht @ r[k].T + rb
                gi, go, gf, gc = np.split(gates, 4, axis=-1)
                pi, po, pf = np.split(p[k], 3)
                i = f[0](clip(gi + pi * ct))
                fg = 1 - i if attrs["input_forget"] else f[0](clip(gf + pf * ct))
                c_new = fg * ct + i * f[1](clip(gc))
                o = f[0](clip(go + po * c_new))
                h_new = o * f[2](c_new)
                ct = np.where(live, c_new, ct)
            elif kind == "gru":
                wz, wr, wh = np.split(xw[t], 3, axis=-1)
                rz, rr, rh = np.split(r[k], 3, axis=0)
                bz, br, bh = np.split(rb, 3)
                z = f[0](clip(wz + ht @ rz.T + bz))
                rg = f[0](clip(wr + ht @ rr.T + br))
                if attrs["linear_before_reset"]:
                    hh = f[1](clip(wh + rg * (ht @ rh.T + bh)))
                else:
                    hh = f[1](clip(wh + (rg * ht) @ rh.T + bh))
                h_new = (1 - z) * hh + z * ht
            else:
                h_new = f[0](clip(xw[t] + ht @ r[k].T + rb))
            ht = np.where(live, h_new, ht)
            y[t, k] = np.where(live, h_new, 0.0)
        yh[k], yc[k] = ht, ct
    dt = x.dtype
    if attrs["layout"] == 1:
        y, yh, yc = y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
    outs = (y.astype(dt), yh.astype(dt))
    return outs + ((yc.astype(dt),) if kind == "lstm" else ())


def _params(kind):
    ps = [Param("hidden_size", "int", doc="hidden units"),
          Param("direction", "str", "forward", "time direction",
                ("forward", "reverse", "bidirectional")),
          Param("activations", "strs", (), "ONNX activation names (default per layer)"),
          Param("activation_alpha", "floats", (), "alphas, consumed in activation order"),
          Param("activation_beta", "floats", (), "betas, consumed in activation order"),
          Param("clip", "float", 0.0, "clip gate pre-activations to +-clip; 0 = off"),
          Param("layout", "int", 0, "0: (seq, batch, ...); 1: (batch, seq, ...)", (0, 1)),
          Param("use_bias", "bool", False, "input B given"),
          Param("use_sequence_lens", "bool", False, "input sequence_lens given"),
          Param("use_initial_h", "bool", False, "input initial_h given")]
    if kind == "lstm":
        ps += [Param("input_forget", "bool", False, "couple input and forget gates"),
               Param("use_initial_c", "bool", False, "input initial_c given"),
               Param("use_peepholes", "bool", False, "input P given")]
    if kind == "gru":
        ps += [Param("linear_before_reset", "bool", False, "apply the reset gate after R")]
    return ps


for _kind, _doc in (("lstm", "ONNX LSTM: outputs Y (seq, dirs, batch, hidden), Y_h, Y_c."),
                    ("gru", "ONNX GRU: outputs Y (seq, dirs, batch, hidden), Y_h."),
                    ("rnn", "ONNX RNN (simple recurrent layer): outputs Y, Y_h.")):
    defs.op_once(_kind, doc=_doc, inputs=rnn_input_names(_kind),
                  outputs=("Y", "Y_h", "Y_c") if _kind == "lstm" else ("Y", "Y_h"),
                  params=_params(_kind), shape=_shape_rule(_kind), dtype=_dtype_rule(_kind),
                  reference=(lambda k: lambda attrs, *xs: _run(k, attrs, xs))(_kind),
                  pattern=OpPattern.OPAQUE, support_level=2)
