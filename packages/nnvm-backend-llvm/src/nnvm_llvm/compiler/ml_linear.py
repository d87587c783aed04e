"""``linear_classifier``, ``linear_regressor``, ``normalizer``, ``svm_classifier`` and
``svm_regressor`` compiled for llvm: no host step for scikit-learn's linear models and SVMs.

Why: a logistic regression (scaler, linear classifier, normalizer) ran at 3.2x onnxruntime
and an RBF SVC at 4.0x, as NumPy host steps whose call overhead exceeds onnxruntime's whole
run (6-20 us). Each op is one row-loop kernel (``ml_rows``) computing in float64 as the
reference kernels of ``nnvm.ops.ml`` do, with the model's coefficients and support vectors
as immediates in the code (TVM 0.27 has no constant buffers; these models hold tens to a
few thousand values). Labels and score layouts follow ``_lin_cls_ref``, ``_svm_cls_ref``
and ``write_scores`` (onnxruntime's conventions for one score column).

Kept on the host (``supports`` says why): string labels, models over ``MAX_TERMS``
coefficients, unknown or N-d shapes.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx
from tvm.tirx.script.builder import ir as T

from nnvm.ops.ml import _labels

from . import lowering, ml_coupling, ml_rows
from .lowering import Lowering
from .ml_rows import F64, at, c64, x_at

#: coefficients (weights or support-vector values) one kernel holds as immediates
MAX_TERMS = 40_000


def _shape_reason(shapes, what: str) -> str | None:
    x = shapes[0] if shapes else None
    if x is None or len(x) not in (1, 2):
        return f"{what} with an unknown or N-d input shape (llvm compiles (N, F))"
    return None


def _features(shapes) -> int:
    x = shapes[0]
    return int(x[-1]) if x else 1


def _dots(x_buf, row, weights: np.ndarray, dtype: str = F64) -> list:
    """``x[row] @ weights.T + 0`` per weight row, as float64 expressions over immediates
    (zero weights skipped)."""
    xs = [x_at(x_buf, row, f, dtype).astype(F64) for f in range(weights.shape[1])]
    out = []
    for w in weights:
        total = c64(0)
        for f, v in enumerate(w.tolist()):
            if v != 0.0:
                total = total + xs[f] * c64(v)
        out.append(total)
    return out


def _keep(buf, values) -> None:
    """Store expressions into a local scratch (each later read is one load, not a copy of
    the whole expression)."""
    for c, v in enumerate(values):
        T.buffer_store(buf, v, [c])


# -- linear models ------------------------------------------------------------------------------

def _linear_scores(attrs, x_buf, row, f: int, scratch) -> int:
    """Store ``x @ W.T + b`` of one row into ``scratch``; returns the number of columns."""
    w = np.asarray(attrs["coefficients"], np.float64).reshape(-1, f)
    b = np.asarray(attrs["intercepts"], np.float64)
    dots = _dots(x_buf, row, w)
    if b.size:  # one intercept broadcasts to every column, as in the reference
        dots = [d + c64(b[k] if b.size == len(dots) else b[0]) for k, d in enumerate(dots)]
    _keep(scratch, dots)
    return w.shape[0]


def _linear_supports(what):
    def supports(attrs, shapes):
        reason = _shape_reason(shapes, what)
        if reason:
            return reason
        f, coef = _features(shapes), len(attrs["coefficients"])
        if not coef or coef % f:
            return f"{what} whose coefficients do not split into rows of {f} features"
        if coef > MAX_TERMS:
            return f"{what} with {coef} coefficients (llvm compiles up to {MAX_TERMS})"
        if what == "linear_classifier":
            labels, kind = _labels(attrs)
            if kind != "int64":
                return "linear_classifier with string labels (llvm kernels return numbers)"
            rows = coef // f
            if len(attrs["intercepts"]) != rows or (rows > 1 and len(labels) < rows):
                return "linear_classifier whose intercepts or labels do not match its rows"
        elif len(attrs["intercepts"]) not in (0, 1, coef // f):
            return "linear_regressor whose intercepts do not match its targets"
        return None
    return supports


def _linear_regressor(attrs, ins, outs, ctx):
    f = int(ins[0].shape[-1]) if len(ins[0].shape) else 1
    width = len(attrs["coefficients"]) // f

    def body(in_bufs, out_bufs, row):
        out = out_bufs[0]
        s = T.alloc_buffer((width,), F64, scope="local")
        _linear_scores(attrs, in_bufs[0], row, f, s)
        ml_rows.store_row(attrs["post_transform"], width, lambda c: s[c],
                          lambda c, v: T.buffer_store(out, v.astype(out.dtype), at(out, row, c)))
    return ml_rows.row_kernel(ins, outs, ctx, len(attrs["coefficients"]), body)


def _linear_classifier(attrs, ins, outs, ctx):
    """``_lin_cls_ref``: the label from the raw scores (one column: s > 0 picks the second
    of two labels, else 1 / 0), then ``write_scores`` with add 1 for two labels (binary
    PROBIT: (1 - probit(s), probit(s)))."""
    labels, _ = _labels(attrs)
    f = int(ins[0].shape[-1]) if len(ins[0].shape) else 1
    rows = len(attrs["coefficients"]) // f
    mode = attrs["post_transform"]

    def body(in_bufs, out_bufs, row):
        label, scores = out_bufs
        s = T.alloc_buffer((rows,), F64, scope="local")
        _linear_scores(attrs, in_bufs[0], row, f, s)
        put = lambda c, v: T.buffer_store(scores, v.astype("float32"), [row, c])  # noqa: E731
        if rows > 1:
            pick = T.alloc_buffer((1,), "int32", scope="local")
            ml_rows.argmax_into(pick, lambda c: s[c], rows)
            T.buffer_store(label, ml_rows.label_expr(labels, pick[0]), [row])
            ml_rows.store_row(mode, rows, lambda c: s[c], put)
            return
        win = tirx.Select(s[0] > c64(0), 1, 0)
        T.buffer_store(label, ml_rows.label_expr(labels if len(labels) == 2 else [0, 1], win),
                       [row])
        if len(labels) != 2:  # one column, as it is (PROBIT transformed)
            put(0, ml_rows.probit(s[0]) if mode == "PROBIT" else s[0])
            return
        t = ml_rows.elementwise(mode, s[0]) if mode in ("LOGISTIC", "PROBIT") else s[0]
        put(0, c64(1) - t)
        put(1, t)
    return ml_rows.row_kernel(ins, outs, ctx, len(attrs["coefficients"]), body)


def _normalizer(attrs, ins, outs, ctx):
    """``_normalizer_ref``: each row over its signed max, L1 or L2 norm (0 divides by 1)."""
    f = int(ins[0].shape[-1]) if len(ins[0].shape) else 1
    norm = attrs["norm"]

    def body(in_bufs, out_bufs, row):
        x, out = in_bufs[0], out_bufs[0]
        v = lambda k: x_at(x, row, k, F64)  # noqa: E731
        div = T.alloc_buffer((1,), F64, scope="local")
        T.buffer_store(div, v(0) if norm == "MAX" else c64(0), [0])
        with T.serial(0, f) as k:
            if norm == "MAX":
                T.buffer_store(div, tirx.max(div[0], v(k)), [0])
            elif norm == "L1":
                T.buffer_store(div, div[0] + te.abs(v(k)), [0])
            else:
                T.buffer_store(div, div[0] + v(k) * v(k), [0])
        d = te.sqrt(div[0]) if norm == "L2" else div[0]
        T.buffer_store(div, tirx.Select(d == c64(0), c64(1), d), [0])
        with T.serial(0, f) as k:
            T.buffer_store(out, (v(k) / div[0]).astype("float32"), at(out, row, k))
    return ml_rows.row_kernel(ins, outs, ctx, f, body)


def _normalizer_supports(attrs, shapes):
    return _shape_reason(shapes, "normalizer")


# -- support vector machines --------------------------------------------------------------------

def _kernel_values(attrs, x_buf, row, sv: np.ndarray, scratch, dtype: str) -> None:
    """``ml._kernel`` of one row against every support vector, into ``scratch``; the
    features are read as ``dtype`` first (the classifier's float32, as onnxruntime)."""
    params = list(attrs["kernel_params"]) + [0.0, 0.0, 0.0]
    gamma, coef0, degree = c64(params[0]), c64(params[1]), int(params[2])
    kind = attrs["kernel_type"]
    xs = [x_at(x_buf, row, f, dtype).astype(F64) for f in range(sv.shape[1])]
    for v, vec in enumerate(sv.tolist()):
        if kind == "RBF":  # |x|^2 - 2 x.sv + |sv|^2, as the reference sums it
            d = c64(0)
            for f, s in enumerate(vec):
                d = d + (xs[f] - c64(s)) * (xs[f] - c64(s))
            T.buffer_store(scratch, te.exp(-gamma * tirx.max(d, c64(0))), [v])
            continue
        dot = c64(0)
        for f, s in enumerate(vec):
            if s != 0.0:
                dot = dot + xs[f] * c64(s)
        if kind == "POLY":
            T.buffer_store(scratch, gamma * dot + coef0, [v])
            base, value = scratch[v], c64(1)
            for _ in range(degree):
                value = value * base
            dot = value
        elif kind == "SIGMOID":
            dot = te.tanh(gamma * dot + coef0)
        T.buffer_store(scratch, dot, [v])


def _svm_supports(what):
    def supports(attrs, shapes):
        reason = _shape_reason(shapes, what)
        if reason:
            return reason
        f = _features(shapes)
        sv = len(attrs["support_vectors"])
        if sv % max(f, 1):
            return f"{what} whose support vectors do not split into rows of {f} features"
        if sv + len(attrs["coefficients"]) > MAX_TERMS:
            return f"{what} with {sv} support-vector values (llvm compiles up to {MAX_TERMS})"
        params = list(attrs["kernel_params"]) + [0.0, 0.0, 0.0]
        if attrs["kernel_type"] == "POLY" and not 0 <= int(params[2]) <= 16:
            return f"{what} with a POLY kernel of degree {params[2]} (llvm compiles 0-16)"
        if not attrs["rho"]:
            return f"{what} without rho"
        if what == "svm_regressor":
            n = attrs["n_supports"] if attrs["n_supports"] > 0 else f
            return None if len(attrs["coefficients"]) == n else \
                "svm_regressor whose coefficients do not match its support vectors"
        labels, kind = _labels(attrs)
        if kind != "int64":
            return "svm_classifier with string labels (llvm kernels return numbers)"
        pairs = len(labels) * (len(labels) - 1) // 2
        if attrs["prob_a"] and attrs["vectors_per_class"] and (
                len(attrs["prob_a"]) < pairs or len(attrs["prob_b"]) < pairs):
            return "svm_classifier with fewer prob_a/prob_b values than class pairs"
        per_class = list(attrs["vectors_per_class"])
        if per_class and (len(per_class) != len(labels) or sum(per_class) * f != sv or len(
                attrs["coefficients"]) != (len(labels) - 1) * sum(per_class) or len(
                attrs["rho"]) < len(labels) * (len(labels) - 1) // 2):
            return "svm_classifier whose vectors_per_class, coefficients or rho do not match"
        if not per_class and len(attrs["coefficients"]) != len(labels) * f:
            return "linear svm_classifier whose coefficients do not match classes x features"
        return None
    return supports


def _svm_regressor(attrs, ins, outs, ctx):
    f = int(ins[0].shape[-1]) if len(ins[0].shape) else 1
    n_sv = int(attrs["n_supports"])
    coef = np.asarray(attrs["coefficients"], np.float64)
    rho = c64(attrs["rho"][0])

    def body(in_bufs, out_bufs, row):
        out = out_bufs[0]
        s = T.alloc_buffer((max(n_sv, 1),), F64, scope="local")
        if n_sv > 0:
            _kernel_values(attrs, in_bufs[0], row, np.asarray(
                attrs["support_vectors"], np.float64).reshape(n_sv, -1), s, F64)
            total = c64(0)
            for v in range(n_sv):
                total = total + s[v] * c64(coef[v])
        else:
            total = _dots(in_bufs[0], row, coef[:f].reshape(1, f))[0]
        total = total + rho
        if attrs["one_class"]:
            total = tirx.Select(total > c64(0), c64(1), c64(-1))
        T.buffer_store(s, total, [0])
        ml_rows.store_row(attrs["post_transform"], 1, lambda c: s[0], lambda c, v:
                          T.buffer_store(out, v.astype(out.dtype), at(out, row, c)))
    return ml_rows.row_kernel(ins, outs, ctx, max(n_sv, 1) * f, body)


def _svm_classifier(attrs, ins, outs, ctx):
    labels, _ = _labels(attrs)
    n_cls = len(labels)
    f = int(ins[0].shape[-1]) if len(ins[0].shape) else 1
    body = (_ovo_body if attrs["vectors_per_class"] else _linear_svc_body)(attrs, labels, f)
    return ml_rows.row_kernel(ins, outs, ctx, max(len(attrs["support_vectors"]), n_cls * f),
                              body)


def _linear_svc_body(attrs, labels, f):
    """A linear SVC: one score per class (+ rho[0]); two classes pick the second when the
    best score passes 0.5 (non-negative weights) or 0, as ``_svm_cls_ref``."""
    n_cls = len(labels)
    coef = np.asarray(attrs["coefficients"], np.float64).reshape(n_cls, f)
    threshold = 0.5 if coef.min() >= 0 else 0.0

    def body(in_bufs, out_bufs, row):
        label, scores = out_bufs
        s = T.alloc_buffer((n_cls,), F64, scope="local")
        _keep(s, [d + c64(attrs["rho"][0]) for d in _dots(in_bufs[0], row, coef, "float32")])
        pick = T.alloc_buffer((1,), "int32", scope="local")
        ml_rows.argmax_into(pick, lambda c: s[c], n_cls)
        chosen = pick[0]
        if n_cls == 2:
            best = tirx.max(s[0], s[1])
            passed = best >= c64(threshold) if threshold else best > c64(0)
            chosen = tirx.Select(passed, 1, chosen)
        T.buffer_store(label, ml_rows.label_expr(labels, chosen), [row])
        if n_cls == 1:  # one column as it is (PROBIT transformed)
            T.buffer_store(scores, ml_rows.elementwise(
                "PROBIT" if attrs["post_transform"] == "PROBIT" else "NONE", s[0]).astype(
                "float32"), [row, 0])
            return
        ml_rows.store_row(attrs["post_transform"], n_cls, lambda c: s[c], lambda c, v:
                          T.buffer_store(scores, v.astype("float32"), [row, c]))
    return body


def _ovo_body(attrs, labels, f):
    """``_svm_ovo``: kernel values, one decision value per class pair, votes (s > 0 for the
    first class of the pair), the label with the most votes; scores are the coupled
    probabilities (``prob_a``, ``ml_coupling``) or the decision values through
    ``write_scores`` (one pair: (-s, s) for NONE, else (1 - t, t))."""
    n_cls = len(labels)
    per_class = [int(v) for v in attrs["vectors_per_class"]]
    starts = np.concatenate([[0], np.cumsum(per_class)[:-1]]).astype(int).tolist()
    n_sv = sum(per_class)
    sv = np.asarray(attrs["support_vectors"], np.float64).reshape(n_sv, -1)
    coefs = np.asarray(attrs["coefficients"], np.float64).reshape(-1, n_sv)
    pairs = [(i, j) for i in range(n_cls) for j in range(i + 1, n_cls)]
    mode = attrs["post_transform"]

    def decision(k, i, j, p):
        parts = []
        for cls, row_of_coef in ((i, j - 1), (j, i)):
            part = c64(0)
            for v in range(starts[cls], starts[cls] + per_class[cls]):
                part = part + k[v] * c64(coefs[row_of_coef, v])
            parts.append(part)
        return parts[0] + parts[1] + c64(attrs["rho"][p])

    def body(in_bufs, out_bufs, row):
        label, scores = out_bufs
        k = T.alloc_buffer((max(n_sv, 1),), F64, scope="local")
        _kernel_values(attrs, in_bufs[0], row, sv, k, "float32")
        s = T.alloc_buffer((len(pairs),), F64, scope="local")
        _keep(s, [decision(k, i, j, p) for p, (i, j) in enumerate(pairs)])
        votes = T.alloc_buffer((n_cls,), F64, scope="local")
        for c in range(n_cls):
            total = c64(0)
            for p, (i, j) in enumerate(pairs):
                if c == i:
                    total = total + tirx.Select(s[p] > c64(0), c64(1), c64(0))
                elif c == j:
                    total = total + tirx.Select(s[p] <= c64(0), c64(1), c64(0))
            T.buffer_store(votes, total, [c])
        pick = T.alloc_buffer((1,), "int32", scope="local")
        ml_rows.argmax_into(pick, lambda c: votes[c], n_cls)
        T.buffer_store(label, ml_rows.label_expr(labels, pick[0]), [row])
        put = lambda c, v: T.buffer_store(scores, v.astype("float32"), [row, c])  # noqa: E731
        if attrs["prob_a"]:
            probs = T.alloc_buffer((n_cls,), F64, scope="local")
            ml_coupling.pairwise_probability(attrs, n_cls, pairs, s, probs)
            ml_rows.store_row(mode, n_cls, lambda c: probs[c], put)
        elif len(pairs) != 1:
            ml_rows.store_row(mode, len(pairs), lambda c: s[c], put)
        elif mode == "PROBIT":
            put(0, ml_rows.probit(s[0]))
        elif mode == "NONE":
            put(0, -s[0])
            put(1, s[0])
        else:
            t = ml_rows.sigmoid(s[0]) if mode == "LOGISTIC" else s[0]
            put(0, c64(1) - t)
            put(1, t)
    return body


_RULES = {
    "linear_regressor": (_linear_regressor, _linear_supports("linear_regressor")),
    "linear_classifier": (_linear_classifier, _linear_supports("linear_classifier")),
    "normalizer": (_normalizer, _normalizer_supports),
    "svm_regressor": (_svm_regressor, _svm_supports("svm_regressor")),
    "svm_classifier": (_svm_classifier, _svm_supports("svm_classifier")),
}


def install() -> None:
    """Add the rules unless the table already lowers the ops (its own rule wins)."""
    for name, (rule, supports) in _RULES.items():
        if name not in lowering.LOWERINGS:
            lowering.LOWERINGS[name] = Lowering(rule, "extern", None, supports)
