"""Graph JSON in NNVM's schema: nodes, arg_nodes, node_row_ptr, heads, typed graph attrs.

Reads JSON written by the original NNVM (legacy ``attr``/``param`` node keys, 2-element
entries, ``dtype`` as mshadow type flags) and writes JSON it could read. Malformed input
raises ``SerializationError`` naming the node; nothing in the JSON is ever executed.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import NNVMError, SerializationError
from ..ir import Graph, Node, NodeEntry
from ..params import Param, parse_value, string_to_value, to_string

_FLAGS = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8",
          6: "int64", 7: "bool", 12: "bfloat16"}
_FLAG_OF = {v: k for k, v in _FLAGS.items()}
_SHAPE = Param("shape", "ints")
_DTYPE = Param("dtype", "dtype")
MAX_JSON_BYTES = 1 << 30


# -- save --------------------------------------------------------------------------------------

def graph_to_obj(graph: Graph) -> dict:
    idx = graph.index
    nodes = []
    for nid, node in enumerate(idx.nodes):
        d: dict[str, Any] = {"op": "null" if node.op is None else node.op.name,
                             "name": node.name,
                             "inputs": [list(e) for e in idx.inputs[nid]]}
        attrs = {k: to_string(v) for k, v in node.attrs.items()}
        if attrs:
            d["attrs"] = attrs
        if idx.control_deps[nid]:
            d["control_deps"] = list(idx.control_deps[nid])
        if node.subgraphs:
            d["subgraphs"] = [graph_to_obj(g) for g in node.subgraphs]
        nodes.append(d)
    out = {"nodes": nodes, "arg_nodes": list(idx.input_nodes),
           "node_row_ptr": list(idx.entry_rptr), "heads": [list(e) for e in idx.outputs]}
    attrs = {}
    for key, value in graph.attrs.items():
        typed = _typed_attr(key, value)
        if typed is not None:
            attrs[typed[0]] = typed[1]
            if key == "dtype" and all(t in _FLAG_OF for t in value if t is not None):
                attrs["dtype"] = ["list_int", [_FLAG_OF.get(t, -1) for t in value]]
    if attrs:
        out["attrs"] = attrs
    return out


def _typed_attr(key: str, value: Any) -> tuple[str, list] | None:
    if key == "dtype" and isinstance(value, list):
        return "dltype", ["list_str", value]
    if key == "shape" and isinstance(value, list):
        return "shape", ["list_shape", [None if s is None else list(s) for s in value]]
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return key, ["int", value]
    if isinstance(value, str):
        return key, ["str", value]
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                       for v in value):
        return key, ["list_int", value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return key, ["list_str", value]
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, int)
                                       for k, v in value.items()):
        return key, ["dict_str_int", value]
    return None  # in-memory only (e.g. params, callables)


def save_json(graph: Graph) -> str:
    """Serialise a graph (structure and JSON-typeable attributes) to NNVM graph JSON."""
    return json.dumps(graph_to_obj(graph))


# -- load --------------------------------------------------------------------------------------

def load_json(text: str | bytes) -> Graph:
    """Parse NNVM graph JSON (ours or the original's) into a Graph.

    Raises:
        SerializationError: the JSON is malformed or inconsistent (message names the node).
        OpNotFoundError: a node uses an op no installed plugin registers.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerializationError(f"graph JSON: not UTF-8 ({exc})") from None
    if not isinstance(text, str):
        raise SerializationError(f"graph JSON: expected a string; got {type(text).__name__}")
    if len(text) > MAX_JSON_BYTES:
        raise SerializationError("graph JSON: larger than 1 GiB; refusing to parse")
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise SerializationError(f"graph JSON: not valid JSON ({exc})") from None
    return obj_to_graph(obj)


def _fail(where: str, what: str) -> SerializationError:
    return SerializationError(f"graph JSON: {where}: {what}")


def _entry(raw: Any, n_nodes: int, where: str) -> tuple[int, int, int]:
    if not isinstance(raw, list) or len(raw) not in (2, 3) or \
            not all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        raise _fail(where, f"an entry must be [node_id, index] or [node_id, index, version]; "
                           f"got {raw!r}")
    nid, index, version = (raw + [0])[:3]
    if not 0 <= nid < n_nodes:
        raise _fail(where, f"entry refers to node {nid}, which is not defined before it")
    return nid, index, version


def obj_to_graph(obj: Any) -> Graph:
    from ..op import get_op

    if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list):
        raise SerializationError("graph JSON: expected an object with a 'nodes' list")
    nodes: list[Node] = []
    for nid, raw in enumerate(obj["nodes"]):
        where = f"node #{nid}"
        if not isinstance(raw, dict):
            raise _fail(where, "must be an object")
        name, op_name = raw.get("name"), raw.get("op")
        if not isinstance(name, str) or not isinstance(op_name, str):
            raise _fail(where, "needs string fields 'op' and 'name'")
        where = f"node #{nid} '{name}' (op {op_name})"
        attrs = raw.get("attrs", raw.get("attr", raw.get("param", {}))) or {}
        if not isinstance(attrs, dict) or not all(isinstance(k, str) for k in attrs):
            raise _fail(where, "'attrs' must be an object of strings")
        inputs_raw = raw.get("inputs", [])
        if not isinstance(inputs_raw, list):
            raise _fail(where, "'inputs' must be a list")
        entries = [_entry(e, nid, where) for e in inputs_raw]
        deps = raw.get("control_deps", []) or []
        if not isinstance(deps, list) or not all(isinstance(d, int) and 0 <= d < nid
                                                 for d in deps):
            raise _fail(where, "'control_deps' must list ids of earlier nodes")
        subs = raw.get("subgraphs", []) or []
        if not isinstance(subs, list):
            raise _fail(where, "'subgraphs' must be a list")
        if op_name == "null":
            if entries:
                raise _fail(where, "a variable cannot have inputs")
            node = Node(None, name, _variable_attrs(attrs, where))
        else:
            op = get_op(op_name)
            try:
                parsed = op.parse_attrs({k: v for k, v in attrs.items()}, where, strict=False)
            except NNVMError as exc:
                raise _fail(where, str(exc)) from None
            inputs = []
            for src, index, version in entries:
                if index >= nodes[src].num_outputs:
                    raise _fail(where, f"input refers to output {index} of node "
                                       f"'{nodes[src].name}', which has "
                                       f"{nodes[src].num_outputs} output(s)")
                inputs.append(NodeEntry(nodes[src], index, version))
            try:
                expected = op.num_inputs(parsed)
            except Exception as exc:  # noqa: BLE001
                raise _fail(where, f"cannot determine inputs from attrs ({exc!r})") from None
            if expected != len(inputs):
                raise _fail(where, f"has {len(inputs)} inputs; op {op.name} expects {expected}")
            node = Node(op, name, parsed, inputs, [nodes[d] for d in deps],
                        [obj_to_graph(s) for s in subs])
        nodes.append(node)
    heads_raw = obj.get("heads")
    if not isinstance(heads_raw, list) or not heads_raw:
        raise SerializationError("graph JSON: 'heads' must be a non-empty list of entries")
    heads = []
    for h in heads_raw:
        nid, index, version = _entry(h, len(nodes), "heads")
        if index >= nodes[nid].num_outputs:
            raise _fail("heads", f"output {index} of node '{nodes[nid].name}' does not exist")
        heads.append(NodeEntry(nodes[nid], index, version))
    graph = Graph(heads)
    _check_row_ptr(obj, nodes)
    graph.attrs = _load_attrs(obj.get("attrs", {}) or {}, nodes, graph)
    return graph


def _variable_attrs(attrs: dict, where: str) -> dict:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if not isinstance(v, str):
            raise _fail(where, f"attribute '{k}' must be a string")
        try:
            if k in ("shape", "__shape__"):
                out["shape"] = parse_value(_SHAPE, v, where)
            elif k in ("dtype", "__dtype__"):
                val = string_to_value(v)
                out["dtype"] = _FLAGS[val] if isinstance(val, int) and val in _FLAGS else \
                    parse_value(_DTYPE, v, where)
            else:
                out[k] = v
        except NNVMError as exc:
            raise _fail(where, str(exc)) from None
    return out


def _check_row_ptr(obj: dict, nodes: list[Node]) -> None:
    rptr = obj.get("node_row_ptr")
    if rptr is None:
        return
    expected = [0]
    for n in nodes:
        expected.append(expected[-1] + n.num_outputs)
    if rptr != expected:
        raise SerializationError("graph JSON: 'node_row_ptr' does not match the nodes' output "
                                 "counts; the file is corrupt or was written for other op "
                                 "definitions")


def _load_attrs(raw: Any, nodes: list[Node], graph: Graph) -> dict:
    if not isinstance(raw, dict):
        raise SerializationError("graph JSON: 'attrs' must be an object")
    out: dict[str, Any] = {}
    for key, typed in raw.items():
        if not isinstance(typed, list) or len(typed) != 2 or not isinstance(typed[0], str):
            raise _fail(f"graph attribute '{key}'", "must be [type_name, value]")
        kind, value = typed
        if kind == "list_shape":
            if not isinstance(value, list):
                raise _fail(f"graph attribute '{key}'", "list_shape must be a list")
            value = [None if s is None else tuple(_ints(s, key)) for s in value]
        elif kind in ("list_int",):
            value = _ints(value, key)
        elif kind in ("list_str", "list_layout"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _fail(f"graph attribute '{key}'", f"{kind} must be a list of strings")
        elif kind in ("int", "size_t"):
            if not isinstance(value, int):
                raise _fail(f"graph attribute '{key}'", f"{kind} must be an integer")
        elif kind == "str":
            if not isinstance(value, str):
                raise _fail(f"graph attribute '{key}'", "str must be a string")
        elif kind == "dict_str_int":
            if not isinstance(value, dict):
                raise _fail(f"graph attribute '{key}'", "dict_str_int must be an object")
        else:
            continue  # unknown attribute types are skipped, as NNVM's loader does
        if key == "dltype":
            out["dtype"] = value
        elif key == "dtype" and kind == "list_int":
            out.setdefault("dtype", [_FLAGS.get(v) for v in value])
        else:
            out[key] = value
    return _remap(out, nodes, graph)


def _ints(value: Any, key: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                              for v in value):
        raise _fail(f"graph attribute '{key}'", "expected a list of integers")
    return value


def _remap(attrs: dict, nodes: list[Node], graph: Graph) -> dict:
    """Re-index per-node/per-entry attributes if the JSON's node order differs from ours."""
    idx = graph.index
    if [id(n) for n in idx.nodes] == [id(n) for n in nodes]:
        return attrs
    old_rptr = [0]
    for n in nodes:
        old_rptr.append(old_rptr[-1] + n.num_outputs)
    pos = {id(n): i for i, n in enumerate(nodes)}
    node_map = [pos[id(n)] for n in idx.nodes]
    entry_map = [old_rptr[node_map[nid]] + k for nid in range(idx.num_nodes)
                 for k in range(idx.nodes[nid].num_outputs)]
    for key, value in list(attrs.items()):
        if isinstance(value, list) and len(value) == old_rptr[-1]:
            attrs[key] = [value[e] for e in entry_map]
        elif isinstance(value, list) and len(value) == len(nodes):
            attrs[key] = [value[i] for i in node_map]
    return attrs
