"""Graph JSON in NNVM's schema: nodes, arg_nodes, node_row_ptr, heads, typed graph attrs.

Reads JSON written by the original NNVM (legacy ``attr``/``param`` node keys, 2-element
entries, ``dtype`` as NNVM type flags, ``__shape__``/``__dtype__`` variable attributes) and
writes JSON it could read. Loading is a pure data transformation: attribute strings are read
with ``ast.literal_eval`` at most, nothing in the file is executed, and every inconsistency
raises ``SerializationError`` naming the node, never a raw KeyError/IndexError.
"""

from __future__ import annotations

import json
from typing import Any

from .. import graph_attrs
from ..errors import NNVMError, SerializationError
from ..ir import Graph, Node, NodeEntry
from ..params import DTYPES, Param, parse_value, string_to_value, to_string

#: NNVM's type flags (``nnvm/top/tensor.h`` TypeFlag, ``compiler/graph_attr.py``
#: TCODE_TO_DTYPE); -1 means unknown. bfloat16 takes mshadow's 12, which NNVM never used.
TYPE_FLAGS = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8",
              6: "int64", 7: "int16", 8: "uint16", 9: "uint32", 10: "uint64", 11: "bool",
              12: "bfloat16"}
FLAG_OF = {v: k for k, v in TYPE_FLAGS.items()}
MAX_JSON_BYTES = 1 << 30
MAX_SUBGRAPH_DEPTH = 64
_SHAPE = Param("shape", "ints")
_DTYPE = Param("dtype", "dtype")


# -- save --------------------------------------------------------------------------------------

def graph_to_obj(graph: Graph) -> dict:
    """The JSON-ready dict of a graph (structure plus JSON-typeable graph attributes)."""
    idx = graph.index
    nodes = []
    for nid, node in enumerate(idx.nodes):
        d: dict[str, Any] = {"op": "null" if node.op is None else node.op.name,
                             "name": node.name,
                             "inputs": [list(e) for e in idx.inputs[nid]]}
        attrs = _variable_attrs_out(node.attrs) if node.op is None else \
            {k: to_string(v) for k, v in node.attrs.items()}
        if attrs:
            d["attrs"] = attrs
        if idx.control_deps[nid]:
            d["control_deps"] = list(idx.control_deps[nid])
        if node.subgraphs:
            d["subgraphs"] = [graph_to_obj(g) for g in node.subgraphs]
        nodes.append(d)
    out = {"nodes": nodes, "arg_nodes": list(idx.input_nodes),
           "node_row_ptr": list(idx.entry_rptr), "heads": [list(e) for e in idx.outputs]}
    attrs: dict[str, list] = {}
    for key, value in graph.attrs.items():
        typed = _typed_attr(key, value)
        if typed is None:
            continue
        attrs[typed[0]] = typed[1]
        if key == "dtype" and all(t is None or t in FLAG_OF for t in value):
            # NNVM's own spelling next to TVM's dltype, so both runtimes find theirs
            attrs["dtype"] = ["list_int", [-1 if t is None else FLAG_OF[t] for t in value]]
    if attrs:
        out["attrs"] = attrs
    return out


def _variable_attrs_out(attrs: dict) -> dict[str, str]:
    """Variables keep NNVM's keys: ``__shape__`` and ``__dtype__`` (a type flag)."""
    out = {}
    for k, v in attrs.items():
        if k == "shape" and isinstance(v, tuple):
            out["__shape__"] = to_string(v)
        elif k == "dtype" and v in FLAG_OF:
            out["__dtype__"] = str(FLAG_OF[v])
        else:
            out[k] = to_string(v)
    return out


def _typed_attr(key: str, value: Any) -> tuple[str, list] | None:
    if key == "dtype" and isinstance(value, list):
        return "dltype", ["list_str", value]
    if key == "shape" and isinstance(value, list):
        return "shape", ["list_shape", [None if s is None else list(s) for s in value]]
    if isinstance(value, bool) or key == "params":
        return None  # params live in params.bin, never in the graph
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
                                       and not isinstance(v, bool) for k, v in value.items()):
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
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerializationError(f"graph JSON: not UTF-8 ({exc})") from None
    if not isinstance(text, str):
        raise SerializationError(f"graph JSON: expected a string; got {type(text).__name__}")
    if len(text) > MAX_JSON_BYTES:
        raise SerializationError("graph JSON: larger than 1 GiB; refusing to parse")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an over-long integer
        raise SerializationError(f"graph JSON: not valid JSON ({exc})") from None
    return obj_to_graph(obj)


def _fail(where: str, what: str) -> SerializationError:
    return SerializationError(f"graph JSON: {where}: {what}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _entry(raw: Any, n_nodes: int, where: str) -> tuple[int, int, int]:
    if not isinstance(raw, list) or len(raw) not in (2, 3) or not all(map(_is_int, raw)):
        raise _fail(where, f"an entry must be [node_id, index] or [node_id, index, version]; "
                           f"got {raw!r}")
    nid, index, version = (raw + [0])[:3]
    if not 0 <= nid < n_nodes:
        raise _fail(where, f"entry refers to node {nid}, which is not defined before it")
    if index < 0 or version < 0:
        raise _fail(where, f"entry {raw!r} has a negative output index or version")
    return nid, index, version


def obj_to_graph(obj: Any, depth: int = 0) -> Graph:
    """Build a Graph from parsed graph JSON (see ``load_json``)."""
    if depth > MAX_SUBGRAPH_DEPTH:
        raise SerializationError(f"graph JSON: subgraphs nested deeper than "
                                 f"{MAX_SUBGRAPH_DEPTH} levels; refusing")
    if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list):
        raise SerializationError("graph JSON: expected an object with a 'nodes' list")
    nodes: list[Node] = []
    n_outs: list[int] = []  # each node's output count, computed once
    for nid, raw in enumerate(obj["nodes"]):
        node, n_out = _load_node(nid, raw, nodes, n_outs, depth)
        nodes.append(node)
        n_outs.append(n_out)
    heads_raw = obj.get("heads")
    if not isinstance(heads_raw, list) or not heads_raw:
        raise SerializationError("graph JSON: 'heads' must be a non-empty list of entries")
    heads = []
    for h in heads_raw:
        nid, index, version = _entry(h, len(nodes), "heads")
        if index >= n_outs[nid]:
            raise _fail("heads", f"output {index} of node '{nodes[nid].name}' does not exist")
        heads.append(NodeEntry(nodes[nid], index, version))
    _check_arg_nodes(obj.get("arg_nodes"), nodes)
    _check_row_ptr(obj, n_outs)
    graph = Graph(heads)
    try:
        graph.index  # noqa: B018 - index now, so a bad op attribute fails here, not later
    except NNVMError as exc:
        raise SerializationError(f"graph JSON: cannot index the graph ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - a plugin's attribute function on bad attrs
        raise SerializationError(f"graph JSON: cannot index the graph ({exc!r})") from None
    graph.attrs = _load_attrs(obj.get("attrs", {}) or {}, nodes, n_outs, graph)
    return graph


def _load_node(nid: int, raw: Any, nodes: list[Node], n_outs: list[int],
               depth: int) -> tuple[Node, int]:
    from ..op import get_op

    where = f"node #{nid}"
    if not isinstance(raw, dict):
        raise _fail(where, "must be an object")
    name, op_name = raw.get("name"), raw.get("op")
    if not isinstance(name, str) or not isinstance(op_name, str):
        raise _fail(where, "needs string fields 'op' and 'name'")
    where = f"node #{nid} '{name}' (op {op_name})"
    attrs: dict = {}
    for key in ("param", "attr", "attrs"):  # legacy keys first, as NNVM's loader merges them
        part = raw.get(key)
        if part is None:
            continue
        if not isinstance(part, dict):
            raise _fail(where, f"'{key}' must be an object of strings")
        attrs.update(part)
    inputs_raw = raw.get("inputs", [])
    if not isinstance(inputs_raw, list):
        raise _fail(where, "'inputs' must be a list")
    entries = [_entry(e, nid, where) for e in inputs_raw]
    deps = raw.get("control_deps", []) or []
    if not isinstance(deps, list) or not all(_is_int(d) and 0 <= d < nid for d in deps):
        raise _fail(where, "'control_deps' must list ids of earlier nodes")
    subs = raw.get("subgraphs", []) or []
    if not isinstance(subs, list):
        raise _fail(where, "'subgraphs' must be a list")
    if op_name == "null":
        if entries or deps or subs:
            raise _fail(where, "a variable cannot have inputs, control_deps or subgraphs")
        return Node(None, name, _variable_attrs(attrs, where)), 1
    op = get_op(op_name)
    try:
        parsed = op.parse_attrs(dict(attrs), where, strict=False)
    except NNVMError as exc:
        raise _fail(where, str(exc)) from None
    inputs = []
    for src, index, version in entries:
        if index >= n_outs[src]:
            raise _fail(where, f"input refers to output {index} of node '{nodes[src].name}', "
                               f"which has {n_outs[src]} output(s)")
        inputs.append(NodeEntry(nodes[src], index, version))
    try:
        expected = op.num_inputs(parsed)
        node = Node(op, name, parsed, inputs, [nodes[d] for d in deps],
                    [obj_to_graph(s, depth + 1) for s in subs])
        n_out = node.num_outputs  # fails here when the attrs make no sense to the op
    except SerializationError:
        raise
    except Exception as exc:  # noqa: BLE001 - an op's arity function on hostile attrs
        raise _fail(where, f"the attributes do not define the op's inputs/outputs ({exc})"
                    ) from None
    if expected != len(inputs):
        raise _fail(where, f"has {len(inputs)} inputs; op {op.name} expects {expected}")
    return node, n_out


def _variable_attrs(attrs: dict, where: str) -> dict:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise _fail(where, f"attribute {k!r} must be a string")
        try:
            if k in ("shape", "__shape__"):
                out["shape"] = parse_value(_SHAPE, v, where)
                if any(d < 0 for d in out["shape"]):
                    raise _fail(where, f"shape {v!r} has a negative dimension")
            elif k in ("dtype", "__dtype__"):
                val = string_to_value(v)
                if _is_int(val):
                    if val not in TYPE_FLAGS:
                        raise _fail(where, f"unknown type flag {val}; known: {TYPE_FLAGS}")
                    out["dtype"] = TYPE_FLAGS[val]
                else:
                    out["dtype"] = parse_value(_DTYPE, v, where)
            else:
                out[k] = v
        except SerializationError:
            raise
        except NNVMError as exc:
            raise _fail(where, str(exc)) from None
    return out


def _check_arg_nodes(raw: Any, nodes: list[Node]) -> None:
    if raw is None:
        return
    if not isinstance(raw, list) or not all(_is_int(i) and 0 <= i < len(nodes) for i in raw):
        raise SerializationError("graph JSON: 'arg_nodes' must list ids of nodes")
    for i in raw:
        if nodes[i].op is not None:
            raise SerializationError(f"graph JSON: 'arg_nodes' lists node #{i} "
                                     f"'{nodes[i].name}', which is not a variable")


def _check_row_ptr(obj: dict, n_outs: list[int]) -> None:
    rptr = obj.get("node_row_ptr")
    if rptr is None:
        return
    expected = [0]
    for n in n_outs:
        expected.append(expected[-1] + n)
    if rptr != expected:
        raise SerializationError("graph JSON: 'node_row_ptr' does not match the nodes' output "
                                 "counts; the file is corrupt or was written for other op "
                                 "definitions")


def _load_attrs(raw: Any, nodes: list[Node], n_outs: list[int], graph: Graph) -> dict:
    if not isinstance(raw, dict):
        raise SerializationError("graph JSON: 'attrs' must be an object")
    n_entries = sum(n_outs)
    out: dict[str, Any] = {}
    for key, typed in raw.items():
        where = f"graph attribute '{key}'"
        if not isinstance(typed, list) or len(typed) != 2 or not isinstance(typed[0], str):
            raise _fail(where, "must be [type_name, value]")
        kind, value = typed
        value = _typed_value(kind, value, where)
        if value is _SKIP:
            continue  # unknown attribute types are skipped, as NNVM's loader does
        if key == "dtype" and kind == "list_int":
            if "dltype" in raw:
                continue  # TVM's dltype names win over NNVM's flags
            bad = sorted({v for v in value if v != -1 and v not in TYPE_FLAGS})
            if bad:
                raise _fail(where, f"unknown type flag(s) {bad}; known: {TYPE_FLAGS}")
            value = [TYPE_FLAGS.get(v) for v in value]
        elif key in ("dltype", "dtype"):
            key = "dtype"
            if not isinstance(value, list) or not all(v is None or v in DTYPES for v in value):
                raise _fail(where, f"expected a list of dtype names ({', '.join(DTYPES)}); "
                                   f"got {str(value)[:80]}")
        if graph_attrs.get(key).kind == graph_attrs.ENTRY and isinstance(value, list) \
                and len(value) != n_entries:
            raise _fail(where, f"has {len(value)} values; the graph has {n_entries} entries")
        if key in ("shape_inputs", "dtype_inputs") and isinstance(value, list):
            value = _per_input(key, kind, value, nodes, where)
        out[key] = value
    return _remap(out, nodes, n_outs, graph)


def _per_input(key: str, kind: str, value: list, nodes: list[Node], where: str) -> dict:
    """NNVM's list over the inputs (``()`` / ``-1`` = unknown) as our ``{name: value}``."""
    names = [n.name for n in nodes if n.op is None]
    if len(value) != len(names):
        raise _fail(where, f"has {len(value)} values; the graph has {len(names)} inputs")
    if key == "shape_inputs":
        return {n: v for n, v in zip(names, value) if v}
    if kind != "list_int":
        raise _fail(where, "dtype_inputs must be a list_int of NNVM type flags")
    bad = sorted({v for v in value if v != -1 and v not in TYPE_FLAGS})
    if bad:
        raise _fail(where, f"unknown type flag(s) {bad}; known: {TYPE_FLAGS}")
    return {n: TYPE_FLAGS[v] for n, v in zip(names, value) if v != -1}


_SKIP = object()


def _typed_value(kind: str, value: Any, where: str) -> Any:
    if kind == "list_shape":
        if not isinstance(value, list):
            raise _fail(where, "list_shape must be a list")
        shapes = []
        for s in value:
            if s is None:
                shapes.append(None)
                continue
            dims = _ints(s, where)
            if any(d < 0 for d in dims):
                raise _fail(where, f"shape {dims} has a negative dimension")
            shapes.append(tuple(dims))
        return shapes
    if kind == "list_int":
        return _ints(value, where)
    if kind in ("list_str", "list_layout"):
        if not isinstance(value, list) or not all(v is None or isinstance(v, str)
                                                  for v in value):
            raise _fail(where, f"{kind} must be a list of strings")
        return value
    if kind in ("int", "size_t"):
        if not _is_int(value):
            raise _fail(where, f"{kind} must be an integer")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise _fail(where, "str must be a string")
        return value
    if kind == "dict_str_int":
        if not isinstance(value, dict) or not all(map(_is_int, value.values())):
            raise _fail(where, "dict_str_int must be an object of integers")
        return value
    return _SKIP


def _ints(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(map(_is_int, value)):
        raise _fail(where, "expected a list of integers")
    return value


def _remap(attrs: dict, nodes: list[Node], n_outs: list[int], graph: Graph) -> dict:
    """Re-index per-node/per-entry attributes if the JSON's node order differs from ours."""
    idx = graph.index
    if not attrs or [id(n) for n in idx.nodes] == [id(n) for n in nodes]:
        return attrs
    old_rptr = [0]
    for n in n_outs:
        old_rptr.append(old_rptr[-1] + n)
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
