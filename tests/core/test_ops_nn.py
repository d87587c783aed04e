"""nn ops (dense, matmul, conv2d, pooling, softmax, batch_norm, dropout, leaky_relu).

Each case checks the shape and dtype rules and the kernel against a loop-based NumPy
computation written here, and the FGradient against central finite differences.
"""

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import ShapeError, TypeInferenceError
from nnvm.ir import Graph
from nnvm.testing import (OpCase, check_case_forward, check_case_gradient, check_gradient,
                          check_shape_error)


# -- independent NumPy references (explicit loops; small sizes only) ---------------------------

def np_conv2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilation
    pt, pl, pb, pr = pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                           j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    if b is not None:
        out += b[None, :, None, None]
    return out


def _pool_out(size, k, s, p0, p1, ceil):
    span = size + p0 + p1 - k
    if not ceil:
        return span // s + 1
    out = int(np.ceil(span / s)) + 1
    return out - 1 if (out - 1) * s >= size + p0 else out


def np_pool(x, kind, k, s, pads, ceil=False, include_pad=False):
    n, c, h, w = x.shape
    pt, pl, pb, pr = pads
    oh, ow = _pool_out(h, k[0], s[0], pt, pb, ceil), _pool_out(w, k[1], s[1], pl, pr, ceil)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s[0] - pt, j * s[1] - pl
            rs, cs = max(r0, 0), max(c0, 0)
            re, ce = min(r0 + k[0], h), min(c0 + k[1], w)
            win = x[:, :, rs:re, cs:ce]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                div = k[0] * k[1] if include_pad else (re - rs) * (ce - cs)
                out[:, :, i, j] = win.sum(axis=(2, 3)) / div
    return out


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_bn(x, g, b, m, v, axis=1, eps=1e-5, center=True, scale=True):
    shp = [1] * x.ndim
    shp[axis] = -1
    y = (x - m.reshape(shp)) / np.sqrt(v.reshape(shp) + eps)
    if scale:
        y = y * g.reshape(shp)
    if center:
        y = y + b.reshape(shp)
    return y, m, v


def _to_nhwc(f):
    return lambda x, w, b: np.transpose(f(np.transpose(x, (0, 3, 1, 2)),
                                          np.transpose(w, (3, 2, 0, 1)), b), (0, 2, 3, 1))


_var = np.array([0.7, 1.3, 0.9, 1.1])
BN_INPUTS = [(2, 4, 3), (4,), (4,), (4,), _var]

CASES = [
    OpCase("dense", [(3, 5), (4, 5), (4,)], dict(units=4), lambda x, w, b: x @ w.T + b),
    OpCase("dense", [(2, 3, 5), (4, 5)], dict(units=4, use_bias=False),
           lambda x, w: np.einsum("abi,oi->abo", x, w), id="dense_3d_nobias"),
    OpCase("matmul", [(3, 4), (4, 2)], {}, lambda a, b: a @ b),
    OpCase("matmul", [(2, 1, 3, 4), (3, 2, 4)], dict(transpose_b=True),
           lambda a, b: a @ np.swapaxes(b, -1, -2), id="matmul_batch_tb"),
    OpCase("matmul", [(2, 4, 3), (4, 5)], dict(transpose_a=True),
           lambda a, b: np.swapaxes(a, -1, -2) @ b, id="matmul_ta"),
    OpCase("matmul", [(4, 3), (5, 4)], dict(transpose_a=True, transpose_b=True),
           lambda a, b: a.T @ b.T, id="matmul_ta_tb"),
    OpCase("conv2d", [(2, 3, 6, 6), (4, 3, 3, 3), (4,)], dict(channels=4, kernel_size=(3, 3)),
           lambda x, w, b: np_conv2d(x, w, b)),
    OpCase("conv2d", [(2, 4, 7, 6), (6, 2, 3, 2), (6,)],
           dict(channels=6, kernel_size=(3, 2), strides=(2, 1), padding=(1, 2),
                dilation=(2, 1), groups=2),
           lambda x, w, b: np_conv2d(x, w, b, (2, 1), (1, 2, 1, 2), (2, 1), 2),
           id="conv2d_groups_dilation"),
    OpCase("conv2d", [(2, 3, 5, 5), (3, 1, 3, 3)],
           dict(channels=3, kernel_size=(3, 3), padding=(1, 1), groups=3, use_bias=False),
           lambda x, w: np_conv2d(x, w, None, pads=(1, 1, 1, 1), groups=3), id="depthwise"),
    OpCase("conv2d", [(1, 2, 6, 6), (2, 2, 2, 2), (2,)],
           dict(channels=2, kernel_size=(2, 2), strides=(2, 2), padding=(0, 1, 1, 0)),
           lambda x, w, b: np_conv2d(x, w, b, (2, 2), (0, 1, 1, 0)), id="conv2d_asym_pad"),
    OpCase("conv2d", [(2, 5, 5, 3), (3, 3, 3, 4), (4,)],
           dict(channels=4, kernel_size=(3, 3), strides=(2, 2), layout="NHWC",
                kernel_layout="HWIO"), _to_nhwc(lambda x, w, b: np_conv2d(x, w, b, (2, 2))),
           id="conv2d_nhwc"),
    OpCase("_conv2d_backward_data", [(2, 4, 3, 3), (4, 3, 3, 3), (2, 3, 7, 7)],
           dict(channels=4, kernel_size=(3, 3), strides=(2, 2)), None, wrt=["out_grad",
                                                                             "weight"]),
    OpCase("_conv2d_backward_weight", [(2, 4, 3, 3), (2, 4, 7, 7)],
           dict(channels=4, kernel_size=(3, 3), strides=(2, 2), groups=2)),
    OpCase("max_pool2d", [(2, 3, 7, 7)], dict(pool_size=(3, 3), strides=(2, 2)),
           lambda x: np_pool(x, "max", (3, 3), (2, 2), (0, 0, 0, 0))),
    OpCase("max_pool2d", [(2, 2, 7, 6)],
           dict(pool_size=(2, 3), strides=(2, 2), padding=(1, 1), ceil_mode=True),
           lambda x: np_pool(x, "max", (2, 3), (2, 2), (1, 1, 1, 1), ceil=True),
           id="max_pool2d_ceil_pad"),
    OpCase("avg_pool2d", [(2, 3, 6, 6)], dict(pool_size=(2, 2), strides=(2, 2)),
           lambda x: np_pool(x, "avg", (2, 2), (2, 2), (0, 0, 0, 0))),
    OpCase("avg_pool2d", [(2, 2, 7, 7)], dict(pool_size=(3, 3), strides=(2, 2),
                                              padding=(1, 1), ceil_mode=True),
           lambda x: np_pool(x, "avg", (3, 3), (2, 2), (1, 1, 1, 1), ceil=True),
           id="avg_pool2d_excl_pad"),
    OpCase("avg_pool2d", [(1, 2, 5, 5)], dict(pool_size=(3, 3), strides=(1, 1),
                                              padding=(1, 1), count_include_pad=True),
           lambda x: np_pool(x, "avg", (3, 3), (1, 1), (1, 1, 1, 1), include_pad=True),
           id="avg_pool2d_incl_pad"),
    OpCase("_max_pool2d_backward", [(2, 3, 3, 3), (2, 3, 7, 7)],
           dict(pool_size=(3, 3), strides=(2, 2)), grad=False),
    OpCase("_avg_pool2d_backward", [(2, 3, 3, 3), (2, 3, 6, 6)],
           dict(pool_size=(2, 2), strides=(2, 2)), wrt=["out_grad"]),
    OpCase("global_max_pool2d", [(2, 3, 4, 5)], {}, lambda x: x.max(axis=(2, 3),
                                                                   keepdims=True)),
    OpCase("global_avg_pool2d", [(2, 3, 4, 5)], {}, lambda x: x.mean(axis=(2, 3),
                                                                    keepdims=True)),
    OpCase("global_avg_pool2d", [(2, 4, 5, 3)], dict(layout="NHWC"),
           lambda x: x.mean(axis=(1, 2), keepdims=True), id="global_avg_pool2d_nhwc"),
    OpCase("softmax", [(3, 5)], {}, lambda x: np_softmax(x, -1)),
    OpCase("softmax", [(2, 4, 3)], dict(axis=1), lambda x: np_softmax(x, 1), id="softmax_ax1"),
    OpCase("log_softmax", [(3, 5)], {}, lambda x: np.log(np_softmax(x, -1))),
    OpCase("log_softmax", [(2, 4, 3)], dict(axis=0), lambda x: np.log(np_softmax(x, 0)),
           id="log_softmax_ax0"),
    OpCase("batch_norm", BN_INPUTS, {}, lambda *a: np_bn(*a)[0]),
    OpCase("batch_norm", [(2, 3, 4), (4,), (4,), (4,), _var], dict(axis=-1, epsilon=1e-3,
                                                                   center=False),
           lambda *a: np_bn(*a, axis=-1, eps=1e-3, center=False)[0], id="batch_norm_last"),
    OpCase("batch_norm", BN_INPUTS, dict(scale=False),
           lambda *a: np_bn(*a, scale=False)[0], id="batch_norm_noscale"),
    OpCase("dropout", [(3, 4)], dict(rate=0.3), lambda x: x),
    OpCase("leaky_relu", [(3, 4)], dict(alpha=0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_matches_numpy(case):
    check_case_forward(case)


@pytest.mark.parametrize("case", [c for c in CASES if c.grad], ids=lambda c: c.id)
def test_gradient_matches_finite_differences(case):
    check_case_gradient(case)


# -- shape rules: backward inference of parameters, errors naming the node ------------------------

def _shapes(symbol, **shape):
    g = Graph(symbol.outputs).apply("InferShape", shape_inputs=shape)
    idx = g.index
    return {idx.nodes[n].name: g.attrs["shape"][idx.entry_rptr[n]] for n in idx.input_nodes}, \
        [g.attrs["shape"][e] for e in idx.output_entries]


def test_dense_infers_weight_and_bias_from_data():
    x = sym.Variable("x")
    ins, outs = _shapes(sym.dense(x, units=16, name="fc1"), x=(4, 8))
    assert ins == {"x": (4, 8), "fc1_weight": (16, 8), "fc1_bias": (16,)}
    assert outs == [(4, 16)]


def test_dense_infers_data_from_weight_and_output():
    x = sym.Variable("x")
    y = sym.dense(x, units=3, name="fc")
    g = Graph(y.outputs)
    idx = g.index
    seeded = [None] * idx.num_node_entries
    seeded[idx.output_entries[0]] = (5, 3)
    g = g.with_attrs(shape=seeded).apply("InferShape", shape_inputs={"fc_weight": (3, 7)})
    assert g.attrs["shape"][idx.entry_rptr[idx.input_nodes[0]]] == (5, 7)


def test_conv2d_infers_weight_for_groups_and_layouts():
    d = sym.Variable("d")
    ins, outs = _shapes(sym.conv2d(d, channels=8, kernel_size=(3, 3), groups=2, name="c"),
                        d=(1, 4, 9, 9))
    assert ins["c_weight"] == (8, 2, 3, 3) and ins["c_bias"] == (8,)
    assert outs == [(1, 8, 7, 7)]
    ins, outs = _shapes(sym.conv2d(d, channels=6, kernel_size=(3, 3), layout="NHWC",
                                   kernel_layout="HWIO", use_bias=False, name="c2"),
                        d=(1, 9, 9, 4))
    assert ins["c2_weight"] == (3, 3, 4, 6) and outs == [(1, 7, 7, 6)]


def test_batch_norm_infers_parameter_shapes_and_hides_stats():
    d = sym.Variable("d")
    bn = sym.batch_norm(d, axis=1, name="bn")
    assert len(bn.outputs) == 1
    ins, outs = _shapes(bn, d=(2, 5, 3))
    assert all(ins[f"bn_{k}"] == (5,) for k in ("gamma", "beta", "moving_mean", "moving_var"))
    assert outs == [(2, 5, 3)]


def test_dropout_has_one_visible_output():
    assert len(sym.dropout(sym.Variable("x")).outputs) == 1


ERROR_CASES = [
    ("dense", [(3, 5), (4, 6), None], dict(units=4), "weight"),
    ("dense", [(3, 5), None, (3,)], dict(units=4), "bias"),
    ("matmul", [(3, 4), (5, 2)], {}, "contracted"),
    ("conv2d", [(1, 3, 5, 5), (4, 2, 3, 3), None], dict(channels=4, kernel_size=(3, 3)),
     "weight"),
    ("conv2d", [(1, 3, 5, 5), None, None], dict(channels=4, kernel_size=(3, 3), groups=2),
     "divisible"),
    ("conv2d", [(1, 3, 2, 2), None, None], dict(channels=4, kernel_size=(3, 3)), "fit"),
    ("conv2d", [(1, 3, 5, 5), None, None], dict(channels=4, kernel_size=(3, 3),
                                                layout="NCHWc"), "layout"),
    ("conv2d", [(3, 5, 5), None, None], dict(channels=4, kernel_size=(3, 3)), "4-D"),
    ("_conv2d_backward_data", [(1, 4, 3, 3), (4, 3, 3, 3), (1, 3, 5)],
     dict(channels=4, kernel_size=(3, 3), layout="NCHW8c"), "layout"),
    ("_conv2d_backward_weight", [(1, 4, 3, 3), (1, 3, 5)], dict(channels=4, kernel_size=(3, 3)),
     "4-D"),
    ("max_pool2d", [(1, 3, 2, 2)], dict(pool_size=(3, 3)), "fit"),
    ("avg_pool2d", [(1, 3, 4)], dict(pool_size=(2, 2)), "4-D"),
    ("_max_pool2d_backward", [(1, 3, 2, 2), (1, 3, 2)], dict(pool_size=(2, 2), layout="NCH"),
     "layout"),
    ("_avg_pool2d_backward", [(1, 3, 2, 2), (1, 3, 2)], dict(pool_size=(2, 2), layout="XYZW"),
     "layout"),
    ("global_max_pool2d", [(2, 3, 4)], {}, "4-D"),
    ("global_avg_pool2d", [(2, 3, 4)], {}, "4-D"),
    ("softmax", [(2, 3)], dict(axis=2), "axis"),
    ("log_softmax", [(2, 3)], dict(axis=-3), "axis"),
    ("batch_norm", [(2, 3, 4), (4,), None, None, None], {}, "gamma"),
    ("batch_norm", [(2, 3, 4), None, None, (3,), (2,)], {}, "moving_var"),
    ("dropout", [(2, 3)], {}, None),
    ("leaky_relu", [(2, 3)], {}, None),
]


@pytest.mark.parametrize("op_name,shapes,attrs,match", [c for c in ERROR_CASES if c[3]],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_shape_error_names_node(op_name, shapes, attrs, match):
    check_shape_error(op_name, shapes, attrs, match)


def test_dense_contradicting_weight_names_node_in_symbol_api():
    x = sym.Variable("x", shape=(2, 3))
    w = sym.Variable("w", shape=(4, 5))
    with pytest.raises(nnvm.NNVMError, match="fc1"):
        nnvm.compiler.build(sym.dense(x, w, units=4, name="fc1", use_bias=False),
                            target="reference")


# -- dtype rules ------------------------------------------------------------------------------

def _dtypes(symbol, **dtype):
    g = Graph(symbol.outputs).apply("InferType", dtype_inputs=dtype)
    idx = g.index
    return {idx.nodes[n].name: g.attrs["dtype"][idx.entry_rptr[n]] for n in idx.input_nodes}, \
        [g.attrs["dtype"][e] for e in idx.output_entries]


@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
def test_layer_dtypes_propagate_to_parameters(dt):
    x = sym.Variable("x")
    y = sym.conv2d(x, channels=2, kernel_size=(1, 1), name="c")
    y = sym.batch_norm(y, name="bn")
    y = sym.dense(sym.flatten(y), units=3, name="fc")
    ins, outs = _dtypes(y, x=dt)
    assert set(ins.values()) == {dt} and outs == [dt]


def test_dense_rejects_integer_operands():
    with pytest.raises(TypeInferenceError, match="fc"):
        _dtypes(sym.dense(sym.Variable("x"), units=2, name="fc"), x="int32")


def test_matmul_operands_must_share_dtype():
    with pytest.raises(TypeInferenceError, match="mm"):
        _dtypes(sym.matmul(sym.Variable("a"), sym.Variable("b"), name="mm"), a="float32",
                b="float64")


def test_max_pool2d_keeps_integer_dtype():
    x = np.arange(32, dtype=np.int32).reshape(1, 2, 4, 4)
    lib = nnvm.compiler.build(sym.max_pool2d(sym.Variable("x"), pool_size=(2, 2),
                                             strides=(2, 2)),
                              target="reference", shape={"x": x.shape}, dtype="int32")
    (out,) = lib.run(x=x)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np_pool(x, "max", (2, 2), (2, 2), (0,) * 4))


# -- details ---------------------------------------------------------------------------------

def test_max_pool_gradient_goes_to_first_maximum_on_ties():
    x = np.ones((1, 1, 2, 2))
    grads = check_gradient("max_pool2d", [x], dict(pool_size=(2, 2)), out_grads=[np.ones(
        (1, 1, 1, 1))], wrt=[])
    np.testing.assert_array_equal(grads["data"], [[[[1, 0], [0, 0]]]])


def test_batch_norm_outputs_moving_statistics():
    ins = [np.random.default_rng(1).standard_normal(s) if isinstance(s, tuple) else s
           for s in BN_INPUTS]
    from nnvm.testing import check_function

    outs = check_function("batch_norm", ins)
    assert len(outs) == 1
    from nnvm.testing import build_op_graph
    from nnvm.interpreter import Interpreter

    g = build_op_graph("batch_norm")
    names = [e.node.name for e in g.outputs[0].node.inputs]
    _, mean, var = Interpreter(g).run(dict(zip(names, ins)))
    np.testing.assert_array_equal(mean, ins[3])
    np.testing.assert_array_equal(var, ins[4])


def test_conv2d_rejects_unsupported_out_dtype():
    with pytest.raises(ShapeError, match="out_dtype"):
        _shapes(sym.conv2d(sym.Variable("d"), channels=2, kernel_size=(1, 1), out_dtype="int8",
                           name="c"), d=(1, 1, 2, 2))
