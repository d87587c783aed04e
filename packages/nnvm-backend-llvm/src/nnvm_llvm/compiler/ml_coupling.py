"""Platt-scaled, pairwise-coupled SVM probabilities in TIR (``svm_classifier`` with ``prob_a``).

Why: ``SVC(probability=True)`` exports carry ``prob_a``/``prob_b``, and onnxruntime turns the
one-vs-one decision values into class probabilities with libsvm's ``multiclass_probability``
(an iterative solve per row). Run on the host, the per-row Python loop of the reference
(``nnvm.ops.ml._pairwise_probability``) cost far more than the SVM itself; here the same
iteration, step for step in float64, runs inside the row kernel of ``ml_linear``.
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.tirx.script.builder import ir as T

from .ml_rows import F64, c64


def pairwise_probability(attrs, n_cls: int, pairs: list, s, probs) -> None:
    """``probs[c]`` for one row from its decision values ``s[pair]``: the Platt sigmoid
    of each pair (clipped to [1e-7, 1 - 1e-7]), then the coupling iteration of the
    reference (at most max(100, k) sweeps, stopping when ``max |Qp - p'Qp| < 0.005 / k``)."""
    k = n_cls
    pa, pb = attrs["prob_a"], attrs["prob_b"]
    r = T.alloc_buffer((k, k), F64, scope="local")
    for p, (i, j) in enumerate(pairs):
        v = c64(1) / (c64(1) + te.exp(s[p] * c64(pa[p]) + c64(pb[p])))
        T.buffer_store(r, tirx.min(tirx.max(v, c64(1e-7)), c64(1 - 1e-7)), [i, j])
        T.buffer_store(r, c64(1) - r[i, j], [j, i])
    q = T.alloc_buffer((k, k), F64, scope="local")
    for a in range(k):
        for b in range(k):
            if a == b:
                total = c64(0)
                for o in range(k):
                    if o != a:
                        total = total + r[o, a] * r[o, a]
                T.buffer_store(q, total, [a, a])
            else:
                T.buffer_store(q, -r[a, b] * r[b, a], [a, b])
    qp = T.alloc_buffer((k,), F64, scope="local")
    state = T.alloc_buffer((4,), F64, scope="local")  # p'Qp, the step, the error, done
    pqp, diff, err, done = 0, 1, 2, 3
    with T.serial(0, k) as t:
        T.buffer_store(probs, c64(1.0 / k), [t])
    T.buffer_store(state, c64(0), [done])
    with T.serial(0, max(100, k)):
        with T.If(state[done] == c64(0)):
            with T.Then():
                _sweep(k, q, qp, probs, state, pqp, diff, err, done)


def _sweep(k, q, qp, p, state, pqp, diff, err, done) -> None:
    """One iteration of ``_pairwise_probability``: Qp and p'Qp, the convergence test, then
    the coordinate updates with renormalisation."""
    with T.serial(0, k) as t:
        total = c64(0)
        for o in range(k):
            total = total + q[t, o] * p[o]
        T.buffer_store(qp, total, [t])
    T.buffer_store(state, c64(0), [pqp])
    with T.serial(0, k) as t:
        T.buffer_store(state, state[pqp] + p[t] * qp[t], [pqp])
    T.buffer_store(state, c64(0), [err])
    with T.serial(0, k) as t:
        T.buffer_store(state, tirx.max(state[err], te.abs(qp[t] - state[pqp])), [err])
    with T.If(state[err] < c64(0.005 / k)):
        with T.Then():
            T.buffer_store(state, c64(1), [done])
        with T.Else():
            with T.serial(0, k) as t:
                T.buffer_store(state, (-qp[t] + state[pqp]) / q[t, t], [diff])
                d = state[diff]
                T.buffer_store(p, p[t] + d, [t])
                T.buffer_store(state, (state[pqp] + d * (d * q[t, t] + c64(2) * qp[t])) /
                               ((c64(1) + d) * (c64(1) + d)), [pqp])
                with T.serial(0, k) as o:
                    T.buffer_store(p, p[o] / (c64(1) + d), [o])
                with T.serial(0, k) as o:
                    T.buffer_store(qp, (qp[o] + d * q[t, o]) / (c64(1) + d), [o])
