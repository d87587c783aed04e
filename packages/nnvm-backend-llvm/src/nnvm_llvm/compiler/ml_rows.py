"""What the compiled ml ops (``ml_trees``, ``ml_linear``) share: one extern kernel looping
over rows, written with TVM's IR builder, and the ONNX ml post transforms as TIR.

Why one row loop: every ml op is a small per-row computation (a tree walk, a few dot
products) followed by a label pick and a post transform, all of which NumPy's reference
kernel ran as separate host calls costing more than onnxruntime's whole run.

The post transforms (``nnvm.ops.ml.post_transform``) are float64, as the reference computes
them before casting to the output dtype: NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO (exact zeros
stay out of the softmax, an all-zero row is 0.5) and PROBIT (onnxruntime's Winitzki
approximation of erfinv).
"""

from __future__ import annotations

import math

import numpy as np
from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as T

from .schedules import PARALLEL_MIN_WORK

F64 = "float64"


def c64(v):
    return tirx.const(float(v), F64)


def sigmoid(s):
    return c64(1) / (c64(1) + te.exp(-s))


def probit(v):
    """``ml._probit``: sqrt(2) * erfinv(2v - 1); 0 where 2v - 1 is +-1."""
    x = c64(2) * v - c64(1)
    sgn = tirx.Select(x < c64(0), c64(-1), c64(1))
    w = (c64(1) - x) * (c64(1) + x)
    log = te.log(w)
    a = c64(2.0 / (math.pi * 0.147)) + c64(0.5) * log
    r = sgn * te.sqrt(-a + te.sqrt(a * a - log / c64(0.147)))
    return c64(1.41421356) * tirx.Select(w == c64(0), c64(0), r)


def elementwise(mode: str, s):
    """The transform of one value, for the modes that act element by element."""
    if mode == "LOGISTIC":
        return sigmoid(s)
    if mode == "PROBIT":
        return probit(s)
    return s


def store_row(mode: str, width: int, value, store) -> None:
    """``store(c, post_transform(row)[c])`` for c < width, where ``value(c)`` reads the
    row's float64 scores (a buffer load, read several times for the softmaxes)."""
    if mode not in ("SOFTMAX", "SOFTMAX_ZERO"):
        with T.serial(0, width) as c:
            store(c, elementwise(mode, value(c)))
        return
    acc = T.alloc_buffer((2,), F64, scope="local")  # the row's max, then its exp sum
    T.buffer_store(acc, value(0), [0])
    with T.serial(1, width) as c:
        T.buffer_store(acc, tirx.max(acc[0], value(c)), [0])
    top = acc[0]

    def term(c):
        if mode == "SOFTMAX":
            return te.exp(value(c) - top)
        return tirx.Select(te.abs(value(c)) <= c64(1e-7), value(c) * te.exp(-top),
                           te.exp(value(c) - top))
    T.buffer_store(acc, c64(0), [1])
    with T.serial(0, width) as c:
        T.buffer_store(acc, acc[1] + term(c), [1])
    with T.serial(0, width) as c:
        if mode == "SOFTMAX":
            store(c, term(c) / acc[1])
        else:
            store(c, tirx.Select(acc[1] == c64(0), c64(0.5), term(c) / acc[1]))


def x_at(x_buf, row, f, dtype: str):
    """Feature ``f`` of ``row`` of an (N, F) or (F,) input (one row), as ``dtype``."""
    idx = (row, f) if len(x_buf.shape) == 2 else (f,)
    return x_buf[idx].astype(dtype)


def n_rows(x) -> int:
    return int(x.shape[0]) if len(x.shape) == 2 else 1


def at(buf, row, c) -> list:
    """Index of column ``c`` of ``row`` in an (N, C) or (C,) output."""
    return [row, c] if len(buf.shape) == 2 else [c]


def label_expr(labels: list, pick):
    """``labels[pick]`` as int64: ``pick`` itself when the labels are 0..C-1."""
    pick = pick.astype("int64")
    if labels == list(range(len(labels))):
        return pick
    out = tirx.const(int(labels[-1]), "int64")
    for k in range(len(labels) - 2, -1, -1):
        out = tirx.Select(pick == k, tirx.const(int(labels[k]), "int64"), out)
    return out


def row_kernel(ins, outs, ctx, work_per_row: int, body):
    """One extern kernel calling ``body(in_bufs, out_bufs, row)`` for every row of
    ``ins[0]``; rows run in parallel only when ``rows * work_per_row`` repays a launch."""
    rows = n_rows(ins[0])
    parallel = rows > 1 and rows * max(work_per_row, 1) >= PARALLEL_MIN_WORK // 16

    def fcompute(in_bufs, out_bufs):
        with IRBuilder() as ib:
            with T.prim_func():
                T.func_name(ctx.name)
                for n, buf in enumerate(list(in_bufs) + list(out_bufs)):
                    T.arg(f"arg{n}", buf)
                with (T.parallel if parallel else T.serial)(0, rows) as row:
                    body(list(in_bufs), list(out_bufs), row)
        return ib.get().body

    res = te.extern([shape for shape, _ in outs], list(ins), fcompute, name=ctx.name,
                    dtype=[dtype for _, dtype in outs])
    return list(res) if isinstance(res, (list, tuple)) else [res]


def argmax_into(pick, values, width: int, usable=None) -> None:
    """``pick[0]`` = first index of the largest ``values(c)`` (among ``usable(c)``): the
    labels of the ml classifiers are NumPy's ``argmax`` of their raw scores."""
    best = T.alloc_buffer((1,), F64, scope="local")
    T.buffer_store(best, c64(-np.inf), [0])
    T.buffer_store(pick, tirx.const(0, "int32"), [0])
    for c in range(width):
        better = values(c) > best[0]
        if usable is not None:
            better = tirx.And(usable(c), better)
        with T.If(better):
            with T.Then():
                T.buffer_store(best, values(c), [0])
                T.buffer_store(pick, tirx.const(c, "int32"), [0])
