"""The shape grid of the roofline sweep: the distinct one-op workloads of the real-model corpus.

Why from the corpus: a schedule is "fast" only for the shapes it meets; the shapes real models
(that nobody here wrote) feed each op class are the ones that must be near the roofline. Every
cached corpus model (``benchmarks/corpus``; nothing is downloaded) is read at its manifest input
shapes; ONNX shape inference gives most tensor shapes, and for the few it cannot resolve
(shapes computed at run time: transformer reshapes, detection heads) onnxruntime runs the model
once with those values exposed as outputs, which gives their exact shapes. Each node of a
swept class becomes a *workload*: op type, attributes, input shapes and which inputs are
constants (weights), deduplicated across models with a count and the models it came from.

Classes the corpus does not contain (LRN, GRU, 3-D conv) or holds only once come from
``EXTRAS``, each naming where its shape comes from (issue 14's AlexNet, the corpus LSTM's
sizes, C3D).
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "corpus"))
import corpus  # noqa: E402

#: ONNX op types swept, in the default domain
SWEPT_OPS = {"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
             "GlobalMaxPool", "LpPool", "LRN", "BatchNormalization", "LayerNormalization",
             "InstanceNormalization", "GroupNormalization", "Softmax", "LogSoftmax", "LSTM",
             "GRU", "RNN"}

CLASSES = ("conv1d", "conv2d", "conv2d-grouped", "conv2d-depthwise", "conv1d-grouped",
           "conv1d-depthwise", "conv3d", "dense", "gemv", "batch_matmul", "pool", "global_pool",
           "lrn", "batch_norm", "layer_norm", "instance_norm", "group_norm", "softmax", "lstm",
           "gru", "rnn")

#: version of the cached grid's layout: a grid written by another version is extracted again
GRID_FORMAT = 4

_NORMS = {"BatchNormalization": "batch_norm", "LayerNormalization": "layer_norm",
          "InstanceNormalization": "instance_norm", "GroupNormalization": "group_norm"}


def op_class(op: str, shapes: list, consts: list, attrs: dict) -> str:
    """The class a workload is reported under (``CLASSES``)."""
    if op == "Conv":
        w = shapes[1]
        dims = len(w) - 2
        group = int(attrs.get("group", 1))
        kind = ""
        if group > 1:
            kind = "-depthwise" if group == shapes[0][1] and w[1] == 1 else "-grouped"
        return f"conv{dims}d{kind if dims < 3 else ''}"
    if op in ("Gemm", "MatMul"):
        a, b = shapes[0], shapes[1]
        if op == "MatMul" and len(b) >= 3 and int(np.prod(b[:-2])) > 1:
            return "batch_matmul"
        rows = int(np.prod(a[:-1])) if op == "MatMul" or not attrs.get("transA") else a[-1]
        return "gemv" if rows == 1 else "dense"
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return "pool"
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        return "global_pool"
    if op in _NORMS:
        return _NORMS[op]
    if op in ("Softmax", "LogSoftmax"):
        return "softmax"
    return op.lower()


def workload(op: str, attrs: dict, inputs: list, outputs: int, source: str,
             opset: int = 17) -> dict:
    """One workload record; ``inputs`` is ``[{"shape", "dtype", "const"}, or None]`` in ONNX
    input order (None: an omitted optional input); ``opset`` is its model's."""
    shapes = [i["shape"] if i else None for i in inputs]
    consts = [bool(i and i["const"]) for i in inputs]
    return {"cls": op_class(op, shapes, consts, attrs), "op": op, "attrs": attrs,
            "inputs": inputs, "outputs": outputs, "opset": opset, "count": 1,
            "models": [source]}


def key(w: dict) -> str:
    """Identity of a workload across models; the opset only where it changes the math
    (Softmax before opset 13 flattens from ``axis`` on)."""
    old_softmax = w["op"] in ("Softmax", "LogSoftmax") and w["opset"] < 13
    return json.dumps([w["op"], w["attrs"], w["inputs"], w["outputs"], old_softmax],
                      sort_keys=True)


def _f32(shape, const=False):
    return {"shape": list(shape), "dtype": "float32", "const": const}


#: shapes the corpus lacks, each with where it comes from
EXTRAS = [
    workload("LRN", {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
             [_f32((1, 64, 55, 55))], 1, "extra: AlexNet LRN 1 (issue 14)"),
    workload("LRN", {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
             [_f32((1, 192, 27, 27))], 1, "extra: AlexNet LRN 2 (issue 14)"),
    workload("Conv", {"kernel_shape": [11, 11], "strides": [4, 4], "pads": [2, 2, 2, 2]},
             [_f32((1, 3, 224, 224)), _f32((64, 3, 11, 11), True), _f32((64,), True)], 1,
             "extra: AlexNet conv1 11x11 stride 4 (issue 14)"),
    workload("Gemm", {"transB": 1}, [_f32((1, 9216)), _f32((4096, 9216), True),
                                     _f32((4096,), True)], 1,
             "extra: AlexNet fc6 9216x4096 at batch 1 (issue 14)"),
    workload("GRU", {"hidden_size": 64, "linear_before_reset": 1},
             [_f32((1, 1, 128)), _f32((1, 192, 128), True), _f32((1, 192, 64), True),
              _f32((1, 384), True), None, _f32((1, 1, 64))], 2,
             "extra: GRU step at the corpus VAD LSTM's sizes"),
    workload("GRU", {"hidden_size": 128, "linear_before_reset": 1},
             [_f32((64, 1, 128)), _f32((1, 384, 128), True), _f32((1, 384, 128), True),
              _f32((1, 768), True)], 1, "extra: GRU over 64 steps, CRNN-OCR size"),
    workload("Conv", {"kernel_shape": [3, 3, 3], "pads": [1] * 6},
             [_f32((1, 3, 16, 112, 112)), _f32((64, 3, 3, 3, 3), True), _f32((64,), True)], 1,
             "extra: 3-D conv, C3D's first layer (no corpus model has one)"),
    workload("Conv", {"kernel_shape": [3, 3, 3], "pads": [1] * 6, "strides": [1, 2, 2]},
             [_f32((1, 64, 8, 28, 28)), _f32((128, 64, 3, 3, 3), True)], 1,
             "extra: 3-D conv, a strided video block (no corpus model has one)"),
    workload("InstanceNormalization", {"epsilon": 1e-5},
             [_f32((1, 64, 128, 128)), _f32((64,), True), _f32((64,), True)], 1,
             "extra: style-transfer instance norm"),
]


# ------------------------------------------------------------------------------ extraction
#: attribute values that change nothing at inference, dropped so that two exports of the same
#: workload (one spelling out a default, one not) are one workload; ``epsilon`` changes
#: values, not work, and is left at the op's default
_INERT = {"training_mode": 0, "stash_type": 1, "storage_order": 0, "auto_pad": "NOTSET",
          "transA": 0, "transB": 0, "ceil_mode": 0, "count_include_pad": 0, "group": 1}


def _inert(op: str, name: str, value) -> bool:
    if name in ("momentum", "epsilon") or _INERT.get(name, object()) == value:
        return True
    if name in ("dilations", "strides") and all(v == 1 for v in value):
        return True
    if name == "pads" and all(v == 0 for v in value):
        return True
    return op == "Gemm" and name in ("alpha", "beta") and value == 1.0


def _attrs(node) -> dict:
    from onnx import helper

    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, (list, tuple)):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        elif not isinstance(v, (int, float, str)):
            return {"__unsupported__": a.name}  # a tensor/graph attribute: not swept
        if not _inert(node.op_type, a.name, v):
            out[a.name] = v
    return OrderedDict(sorted(out.items()))


def _fix_inputs(model, entry: dict) -> None:
    """Pin the graph inputs to the manifest's concrete shapes (shape inference needs them)."""
    shapes = {i["name"]: i.get("shape") for i in entry["inputs"]}
    for gi in model.graph.input:
        want = shapes.get(gi.name)
        if want is None:
            continue
        dims = gi.type.tensor_type.shape.dim
        for d, v in zip(dims, want):
            d.ClearField("dim_param")
            d.dim_value = int(v)


def _known_shapes(model) -> tuple[dict, dict, set]:
    """(name -> shape, name -> elem type, constant names) after ONNX shape inference."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - then every shape comes from the onnxruntime run
        inferred = model
    shapes, types, consts = {}, {}, set()
    g = inferred.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        t = vi.type.tensor_type
        types[vi.name] = t.elem_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = [int(d.dim_value) for d in t.shape.dim]
    for init in g.initializer:
        shapes[init.name], types[init.name] = list(init.dims), init.data_type
        consts.add(init.name)
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]], types[n.output[0]] = list(a.t.dims), a.t.data_type
                    consts.add(n.output[0])
    return shapes, types, consts


def _run_for_shapes(model, entry: dict, names: list[str]) -> dict:
    """Exact shapes of ``names`` from one onnxruntime run with them exposed as outputs."""
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    present = {o.name for o in m.graph.output}
    for n in names:
        if n not in present:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    so = ort.SessionOptions()
    so.log_severity_level, so.intra_op_num_threads = 3, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = corpus.make_inputs(entry)
    feed = {i.name: feed[i.name] for i in sess.get_inputs() if i.name in feed}
    outs = sess.run(names, feed)
    return {n: list(np.shape(v)) for n, v in zip(names, outs)}


def model_workloads(entry: dict) -> tuple[list[dict], str]:
    """The swept workloads of one cached corpus model, and a note (what was left out)."""
    import onnx
    from onnx import TensorProto

    model = onnx.load(str(corpus.model_path(entry)))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    _fix_inputs(model, entry)
    shapes, types, consts = _known_shapes(model)
    nodes = [n for n in model.graph.node if n.op_type in SWEPT_OPS and n.domain in ("", "ai.onnx")]
    missing = sorted({v for n in nodes for v in list(n.input) + list(n.output)
                      if v and v not in shapes})
    note = ""
    if missing:
        try:
            shapes.update(_run_for_shapes(model, entry, missing))
        except Exception as exc:  # noqa: BLE001 - keep the nodes whose shapes are known
            note = f"{len(missing)} shapes unknown ({type(exc).__name__})"
    out, skipped = [], 0
    for n in nodes:
        attrs = _attrs(n)
        ins = []
        for name in n.input:
            if not name:
                ins.append(None)
                continue
            if name not in shapes or types.get(name, TensorProto.FLOAT) not in (
                    TensorProto.FLOAT, TensorProto.INT32):
                ins = None
                break
            dtype = "int32" if types.get(name) == TensorProto.INT32 else "float32"
            ins.append({"shape": shapes[name], "dtype": dtype, "const": name in consts})
        if ins is None or "__unsupported__" in attrs or ins[0] is None \
                or ins[0]["dtype"] != "float32":
            skipped += 1
            continue
        outputs = len(n.output)
        while outputs > 1 and not n.output[outputs - 1]:
            outputs -= 1
        out.append(workload(n.op_type, attrs, ins, outputs, entry["id"], opset))
    if skipped:
        note = (note + "; " if note else "") + f"{skipped} nodes not float32 or shape unknown"
    return out, note


def extract(log=print) -> tuple[list[dict], dict]:
    """Every swept workload of every cached corpus model, deduplicated; and the models seen
    (id -> sha256 pinned in the manifest) so a cached grid knows when it is stale."""
    merged: dict[str, dict] = {}
    seen = {}
    for entry in corpus.models():
        path = corpus.model_path(entry)
        if not path.exists():
            continue
        try:
            found, note = model_workloads(entry)
        except Exception as exc:  # noqa: BLE001 - one unreadable model must not stop the grid
            log(f"  {entry['id']}: skipped ({type(exc).__name__}: {str(exc)[:80]})")
            continue
        seen[entry["id"]] = entry["sha256"]
        if note:
            log(f"  {entry['id']}: {note}")
        for w in found:
            k = key(w)
            if k in merged:
                merged[k]["count"] += 1
                if entry["id"] not in merged[k]["models"]:
                    merged[k]["models"].append(entry["id"])
            else:
                merged[k] = w
    return list(merged.values()), seen


def cached_models() -> dict:
    """id -> pinned sha256 of the corpus models present in the cache."""
    return {e["id"]: e["sha256"] for e in corpus.models() if corpus.model_path(e).exists()}


def load_or_extract(path: Path, refresh: bool = False, log=print) -> list[dict]:
    """The corpus workloads, from ``path`` when it was extracted from the same cached models."""
    if path.exists() and not refresh:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") == GRID_FORMAT and data.get("models") == cached_models():
            return data["workloads"]
        log(f"grid {path} is stale (the cached corpus changed): extracting again")
    missing = [e["id"] for e in corpus.models() if not corpus.model_path(e).exists()]
    if missing:
        log(f"{len(missing)} corpus models not cached, skipped (benchmarks/corpus/fetch.py "
            f"fetches them): {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}")
    workloads, seen = extract(log)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": GRID_FORMAT, "models": seen, "workloads": workloads}
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return workloads


def _bytes(w: dict) -> int:
    return sum(int(np.prod(i["shape"], dtype=np.int64)) * 4 for i in w["inputs"] if i)


def _signature(w: dict) -> str:
    """What makes a workload "odd" within its class: its attributes and which inputs are
    constant, not its sizes (kernel 11 stride 4, group 3, a weight that is an activation)."""
    a = {k: v for k, v in w["attrs"].items() if k not in ("epsilon", "alpha", "beta", "bias")}
    return json.dumps([w["op"], a, [bool(i and i["const"]) for i in w["inputs"]],
                       [len(i["shape"]) if i else 0 for i in w["inputs"]]], sort_keys=True)


def select(workloads: list[dict], classes: list[str] | None, per_class: int) -> list[dict]:
    """At most ``per_class`` workloads of each class, taken in turn from three orders: the odd
    ones (one per distinct signature; ``EXTRAS`` first, then the most frequent), the largest
    (bytes touched) and the most frequent, so the grid is bounded yet keeps the big, the
    common and the unusual."""
    by_cls: dict[str, list[dict]] = {}
    for w in workloads:
        if classes is None or w["cls"] in classes:
            by_cls.setdefault(w["cls"], []).append(w)
    chosen = []
    for cls in [c for c in CLASSES if c in by_cls] + sorted(set(by_cls) - set(CLASSES)):
        pool = by_cls[cls]
        firsts, sigs = [], set()
        extra_first = sorted(pool, key=lambda w: (not w["models"][0].startswith("extra:"),
                                                  -w["count"], -_bytes(w)))
        for w in extra_first:
            if _signature(w) not in sigs:
                sigs.add(_signature(w))
                firsts.append(w)
        orders = [firsts, sorted(pool, key=lambda w: -_bytes(w)),
                  sorted(pool, key=lambda w: (-w["count"], -_bytes(w)))]
        picked: dict[str, dict] = {}
        while len(picked) < min(per_class, len(pool)):
            for order in orders:
                while order and key(order[0]) in picked:
                    order.pop(0)
                if order and len(picked) < per_class:
                    w = order.pop(0)
                    picked[key(w)] = w
        chosen += sorted(picked.values(), key=_bytes)
    return chosen
