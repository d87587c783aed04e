"""Mutations of the ONNX fuzzer (scripts/fuzz_onnx.py).

Most keep the model valid enough to get past the importer, so that the back end is what gets
tested: input shapes, attribute values (seen on the same op in another seed, or a step away),
the opset version, input and output dtypes (through a Cast), ops appended to or between values
of known type, a node bypassed, special values (NaN, inf, extremes) in initializers and inputs.
``onnx.checker`` with full shape inference decides, and a rejected mutation is retried. The
rest are hostile: ops swapped, inputs rewired, absurd attributes and dims, flipped, cut or
random bytes; the importer must refuse those with an NNVMError.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from fuzz_onnx_seeds import Seed


def _value_types(model) -> dict:
    """{value name: (elem_type, shape tuple or None)} from onnx shape inference."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - an invalid model simply has no known types
        inferred = model
    out = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.elem_type:
            continue
        shape = None
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            shape = None if None in dims else tuple(dims)
        out[vi.name] = (tt.elem_type, shape)
    return out


def _has_subgraphs(model) -> bool:
    return any(a.type in (a.GRAPH, a.GRAPHS) for n in model.graph.node for a in n.attribute)


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _fresh(model, base: str) -> str:
    used = {o for n in model.graph.node for o in n.output} | \
        {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    k = 0
    while f"{base}_fz{k}" in used:
        k += 1
    return f"{base}_fz{k}"


def _add_output(model, name: str, replace: str | None = None) -> None:
    """Make ``name`` a graph output (typed by shape inference), optionally in place of one."""
    from onnx import helper

    types = _value_types(model)
    et, shape = types.get(name, (0, None))
    vi = helper.make_tensor_value_info(name, et or 1, shape)
    outs = model.graph.output
    idx = [i for i, o in enumerate(outs) if o.name == replace]
    if idx:
        outs[idx[0]].CopyFrom(vi)
    elif all(o.name != name for o in outs):
        outs.append(vi)


def mut_input_shape(m, feed, rnd, pool) -> bool:
    names = [k for k, v in feed.items() if v.ndim and v.size <= 1 << 16]
    if not names:
        return False
    name = rnd.choice(names)
    arr = feed[name]
    ax = rnd.randrange(arr.ndim)
    d = arr.shape[ax]
    new = rnd.choice([v for v in (d + 1, max(1, d - 1), 1, 2 * d, 3) if v != d] or [d + 1])
    shape = list(arr.shape)
    shape[ax] = new
    feed[name] = np.resize(arr, shape) if arr.size else np.zeros(shape, arr.dtype)
    for vi in m.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name == name and len(dims) == arr.ndim:
            dims[ax].dim_value = new
    return True


def _nudge_ints(vals: list, rnd) -> list:
    vals = list(vals)
    if not vals:
        return [rnd.choice([0, 1])]
    how = rnd.randrange(4)
    if how == 0:
        i = rnd.randrange(len(vals))
        vals[i] += rnd.choice([-1, 1])
    elif how == 1:
        vals.reverse()
    elif how == 2 and len(vals) > 1:
        vals.pop(rnd.randrange(len(vals)))
    else:
        vals.append(vals[-1])
    return vals


def mut_attribute(m, feed, rnd, pool) -> bool:
    from onnx import helper, numpy_helper

    nodes = [n for n in m.graph.node
             if any(a.type not in (a.GRAPH, a.GRAPHS) for a in n.attribute)]
    if not nodes:
        return False
    n = rnd.choice(nodes)
    a = rnd.choice([a for a in n.attribute if a.type not in (a.GRAPH, a.GRAPHS)])
    seen = [v for v in pool.get((n.op_type, a.name), []) if v != a]
    if seen and rnd.random() < 0.5:
        a.CopyFrom(rnd.choice(seen))
        return True
    if a.type == a.INT:
        new = helper.make_attribute(a.name, a.i + rnd.choice([-2, -1, 1, 2]) if rnd.random() < .7
                                    else rnd.choice([0, 1, -1]))
    elif a.type == a.INTS:
        new = helper.make_attribute(a.name, _nudge_ints(a.ints, rnd))
    elif a.type == a.FLOAT:
        new = helper.make_attribute(a.name, a.f * rnd.choice([0.5, 2.0, -1.0, 0.0]) + rnd.choice(
            [0.0, 1e-3]))
    elif a.type == a.FLOATS and a.floats:
        vals = list(a.floats)
        vals[rnd.randrange(len(vals))] *= rnd.choice([0.5, 2.0, -1.0])
        new = helper.make_attribute(a.name, vals)
    elif a.type == a.TENSOR:
        arr = numpy_helper.to_array(a.t).copy()
        if arr.dtype.kind in "iu" and arr.size:
            flat, info = arr.reshape(-1), np.iinfo(arr.dtype)
            i = rnd.randrange(flat.size)
            flat[i] = min(max(int(flat[i]) + rnd.choice([-1, 1]), info.min), info.max)
        elif arr.dtype.kind == "f" and arr.size:
            arr = arr * arr.dtype.type(rnd.choice([0.5, -1.0, 0.0, 1e3]))
        elif arr.dtype.kind in "iuf":
            arr = arr.reshape(arr.shape + (1,)) if arr.ndim < 3 else arr
        else:
            return False
        new = helper.make_attribute(a.name, numpy_helper.from_array(arr, a.t.name))
    else:
        return False
    a.CopyFrom(new)
    return True


def mut_opset(m, feed, rnd, pool) -> bool:
    import onnx

    latest = onnx.defs.onnx_opset_version()
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            choices = {v for v in range(o.version - 4, o.version + 5) if 7 <= v <= latest}
            choices |= {7, 11, 13, 17, latest}
            choices.discard(o.version)
            o.version = rnd.choice(sorted(choices))
            return True
    return False


_FLOAT_TYPES = (1, 10, 11)
_DTYPES = {1: np.float32, 10: np.float16, 11: np.float64, 6: np.int32, 7: np.int64, 9: np.bool_,
           2: np.uint8, 3: np.int8}


def mut_input_dtype(m, feed, rnd, pool) -> bool:
    """An input of another dtype, cast back to the one the graph expects."""
    from onnx import helper

    if _has_subgraphs(m):
        return False
    ins = {vi.name: vi for vi in m.graph.input if vi.name in feed}
    names = [k for k in ins if ins[k].type.tensor_type.elem_type in _DTYPES]
    if not names:
        return False
    name = rnd.choice(names)
    orig = ins[name].type.tensor_type.elem_type
    new = rnd.choice([t for t in _DTYPES if t != orig and t != 9])
    inner = _fresh(m, name)
    for n in m.graph.node:
        for i, v in enumerate(n.input):
            if v == name:
                n.input[i] = inner
    for o in m.graph.output:
        if o.name == name:
            return False
    m.graph.node.insert(0, helper.make_node("Cast", [name], [inner], to=orig))
    ins[name].type.tensor_type.elem_type = new
    arr = feed[name]
    if arr.dtype.kind == "f" and new not in _FLOAT_TYPES:
        arr = np.nan_to_num(np.round(arr))
    with np.errstate(all="ignore"):
        feed[name] = arr.astype(_DTYPES[new])
    return True


def mut_output_cast(m, feed, rnd, pool) -> bool:
    from onnx import helper

    if not m.graph.output:
        return False
    out = rnd.choice(list(m.graph.output))
    to = rnd.choice(list(_DTYPES))
    name = _fresh(m, out.name)
    m.graph.node.append(helper.make_node("Cast", [out.name], [name], to=to))
    _add_output(m, name, replace=out.name if rnd.random() < 0.5 else None)
    return True


def _unary_node(name, out, et, shape, rnd, opset):
    """A unary op that accepts ``et``, with attributes fitting ``shape`` (rank known)."""
    from onnx import helper

    H = helper.make_node
    r = len(shape)
    ops = ["Identity", "Neg", "Abs", "Shape", "Size"]
    if et in _FLOAT_TYPES:
        ops += ["Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Floor", "Ceil", "Reciprocal",
                "Erf", "Sin", "Elu", "LeakyRelu", "HardSigmoid", "Softplus", "Round", "Sign"]
    if r:
        ops += ["Softmax", "Transpose", "Flatten", "ArgMax", "ReduceSum", "ReduceMax",
                "ReduceMean"] if et in _FLOAT_TYPES else ["Transpose", "ArgMax", "ReduceMax"]
    op = rnd.choice(ops)
    if op == "Softmax":
        return H(op, [name], [out], axis=rnd.randrange(-r, r))
    if op == "Transpose":
        perm = list(range(r))
        rnd.shuffle(perm)
        return H(op, [name], [out], perm=perm)
    if op == "Flatten":
        return H(op, [name], [out], axis=rnd.randrange(0, r + 1))
    if op == "ArgMax":
        return H(op, [name], [out], axis=rnd.randrange(-r, r), keepdims=rnd.randrange(2))
    if op.startswith("Reduce"):
        axes = sorted(rnd.sample(range(r), rnd.randint(1, r)))
        if op == "ReduceSum" and opset >= 13 or opset >= 18:
            return H(op, [name], [out], keepdims=rnd.randrange(2))  # all axes
        return H(op, [name], [out], axes=axes, keepdims=rnd.randrange(2))
    if op == "LeakyRelu":
        return H(op, [name], [out], alpha=rnd.choice([0.01, 0.2]))
    return H(op, [name], [out])


def mut_append_unary(m, feed, rnd, pool) -> bool:
    types = _value_types(m)
    cands = [k for k, (et, shape) in types.items() if shape is not None and et != 8]
    if not cands:
        return False
    name = rnd.choice(cands)
    et, shape = types[name]
    out = _fresh(m, name)
    m.graph.node.append(_unary_node(name, out, et, shape, rnd, _opset(m)))
    outs = [o.name for o in m.graph.output]
    _add_output(m, out, replace=name if name in outs and rnd.random() < 0.5 else None)
    return True


def mut_append_binary(m, feed, rnd, pool) -> bool:
    from onnx import helper

    types = _value_types(m)
    known = [(k, t) for k, t in types.items() if t[1] is not None and t[0] != 8]
    if not known:
        return False
    a, (et, shape) = rnd.choice(known)
    partners = [k for k, t in known if t[0] == et and (t[1] == shape or t[1] == ()
                                                      or t[1] == shape[-1:])]
    b = rnd.choice(partners)
    ops = ["Add", "Sub", "Mul", "Max", "Min", "Equal", "Greater", "Less"]
    if et in _FLOAT_TYPES:
        ops += ["Div", "Pow", "PRelu"]
    op = rnd.choice(ops)
    out = _fresh(m, a)
    m.graph.node.append(helper.make_node(op, [a, b], [out]))
    _add_output(m, out)
    return True


def mut_expose(m, feed, rnd, pool) -> bool:
    produced = [o for n in m.graph.node for o in n.output if o]
    if not produced:
        return False
    _add_output(m, rnd.choice(produced))
    return True


def mut_bypass(m, feed, rnd, pool) -> bool:
    """A node whose output has the type of one of its inputs becomes an Identity of it."""
    from onnx import helper

    types = _value_types(m)
    cands = []
    for i, n in enumerate(m.graph.node):
        if len(n.output) == 1 and n.output[0] in types:
            same = [v for v in n.input if v and types.get(v) == types[n.output[0]]]
            if same and n.op_type != "Identity":
                cands.append((i, rnd.choice(same)))
    if not cands:
        return False
    i, src = rnd.choice(cands)
    node = m.graph.node[i]
    node.CopyFrom(helper.make_node("Identity", [src], [node.output[0]], name=node.name))
    return True


def _special(arr: np.ndarray, rnd) -> np.ndarray:
    arr = arr.copy()
    flat = arr.reshape(-1)
    if not flat.size:
        return arr
    pick = rnd.randrange(5)
    if arr.dtype.kind == "f":
        vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-40]
        if pick == 0:
            flat[:] = 0
        elif pick == 1:
            flat[:] = rnd.choice(vals)
        else:
            for _ in range(rnd.randint(1, 4)):
                flat[rnd.randrange(flat.size)] = rnd.choice(vals)
    elif arr.dtype.kind in "iu" and pick < 2:
        flat[:] = flat[::-1].copy()
    elif arr.dtype.kind in "iu":
        info = np.iinfo(arr.dtype)
        flat[rnd.randrange(flat.size)] = rnd.choice([0, 1, info.min, info.max])
    return arr


def mut_initializer_values(m, feed, rnd, pool) -> bool:
    from onnx import numpy_helper

    inits = [t for t in m.graph.initializer if t.data_type in _FLOAT_TYPES]
    if not inits:
        return False
    t = rnd.choice(inits)
    t.CopyFrom(numpy_helper.from_array(_special(numpy_helper.to_array(t), rnd), t.name))
    return True


def mut_input_values(m, feed, rnd, pool) -> bool:
    if not feed:
        return False
    k = rnd.choice(sorted(feed))
    feed[k] = _special(feed[k], rnd)
    return True


VALID_MUTATIONS = {
    "input_shape": mut_input_shape, "attribute": mut_attribute, "opset": mut_opset,
    "input_dtype": mut_input_dtype, "output_cast": mut_output_cast,
    "append_unary": mut_append_unary, "append_binary": mut_append_binary,
    "expose": mut_expose, "bypass": mut_bypass, "initializer_values": mut_initializer_values,
    "input_values": mut_input_values,
}

_OPS = ["Relu", "Add", "Reshape", "Concat", "Slice", "Gather", "Conv", "MatMul", "Transpose",
        "Squeeze", "Unsqueeze", "Shape", "Expand", "Tile", "Pad", "Resize", "Split", "If",
        "Loop", "Softmax", "ReduceMean", "Cast", "ConstantOfShape", "Range", "TopK", "NoSuchOp"]


def mutate_hostile(m, rnd) -> bytes:
    """A mutation that breaks the model (the importer must say so with an NNVMError)."""
    import onnx

    kind = rnd.randrange(10)
    nodes = m.graph.node
    if kind == 0 and nodes:
        rnd.choice(nodes).op_type = rnd.choice(_OPS)
    elif kind == 1 and nodes:
        n = rnd.choice(nodes)
        if n.input:
            n.input[rnd.randrange(len(n.input))] = rnd.choice(
                ["", "nope", *[o for x in nodes for o in x.output]])
    elif kind == 2 and nodes:
        for a in rnd.choice(nodes).attribute:
            if a.ints:
                a.ints[rnd.randrange(len(a.ints))] = rnd.choice([-5, -1, 0, 1, 7, 1 << 40])
            elif a.type == a.INT:
                a.i = rnd.choice([-3, 0, 1, 2, 99, 1 << 40])
            elif a.type == a.FLOAT:
                a.f = rnd.choice([0.0, -1.0, float("nan"), 1e30])
    elif kind == 3 and m.graph.initializer:
        t = rnd.choice(m.graph.initializer)
        if t.dims:
            t.dims[rnd.randrange(len(t.dims))] = rnd.choice([0, 1, 3, 1 << 33])
        else:
            m.graph.initializer.remove(t)
    elif kind == 4 and len(nodes) > 1:
        i, j = rnd.randrange(len(nodes)), rnd.randrange(len(nodes))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(nodes[i])
        b.CopyFrom(nodes[j])
        nodes[i].CopyFrom(b)
        nodes[j].CopyFrom(a)
    elif kind == 5 and m.graph.input:
        d = m.graph.input[0].type.tensor_type.shape.dim
        if d:
            d[rnd.randrange(len(d))].dim_value = rnd.choice([0, 1, 2, 1 << 34])
    elif kind == 6 and m.opset_import:
        m.opset_import[0].version = rnd.choice([1, 5, 9, 13, 30, 1000])
    data = bytearray(m.SerializeToString())
    if kind >= 7 and data:
        for _ in range(rnd.randint(1, 8)):
            op, pos = rnd.randrange(3), rnd.randrange(len(data))
            if op == 0:
                data[pos] = rnd.randrange(256)
            elif op == 1:
                del data[pos:pos + rnd.randint(1, 16)]
            else:
                data[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
            if not data:
                break
    return bytes(data)


@dataclasses.dataclass
class Case:
    seed: str
    kinds: list
    model: object  # ModelProto, or bytes for hostile cases
    feed: dict
    checker_ok: bool


#: how often each valid mutation is drawn: attribute values and shapes reach the most
#: converter and shape-rule code, so they come up more often
WEIGHTS = {"attribute": 4, "input_shape": 2}


def make_case(seeds: list[Seed], pool: dict, rnd: random.Random) -> Case:
    """A seed with 1-3 valid mutations, retried until onnx.checker (full shape inference)
    accepts them (65%) or taken as they come (20%, the importer's own checks then decide);
    else a hostile mutation (12%) or random bytes (3%)."""
    import onnx

    s = rnd.choice(seeds)
    roll = rnd.random()
    if roll < 0.03:
        data = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 600)))
        return Case(s.name, ["random_bytes"], data, dict(s.feed), False)
    if roll < 0.15:
        m = onnx.ModelProto()
        m.CopyFrom(s.model)
        return Case(s.name, ["hostile"], mutate_hostile(m, rnd), dict(s.feed), False)
    checked = roll >= 0.35
    names = sorted(VALID_MUTATIONS)
    weights = [WEIGHTS.get(k, 1) for k in names]
    for _attempt in range(4 if checked else 1):
        m = onnx.ModelProto()
        m.CopyFrom(s.model)
        feed = dict(s.feed)
        kinds = []
        for k in rnd.choices(names, weights, k=rnd.choice([1, 1, 1, 2, 2, 3])):
            if VALID_MUTATIONS[k](m, feed, rnd, pool):
                kinds.append(k)
        if not checked:
            break
        try:
            onnx.checker.check_model(m, full_check=True)
            return Case(s.name, kinds, m, feed, True)
        except Exception:  # noqa: BLE001 - the mutation broke the model: try another
            continue
    return Case(s.name, kinds, m, feed, False)
