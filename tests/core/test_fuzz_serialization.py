"""Bounded fuzzing of the three readers: graph JSON, param bytes, .nnvm artifacts.

Each case mutates a real blob (byte flips, truncation, insertion, splices, random bytes, and
for JSON/artifacts structured edits that get past the syntax layer). A reader may accept the
input or raise an NNVMError subclass; anything else (KeyError, IndexError, struct.error,
RecursionError, ...) fails the test with the seed that reproduces it. Seeded and fast.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import NNVMError
from nnvm.runtime.artifact import manifest_digest
from nnvm.serialization.graph_json import load_json
from nnvm.serialization.param_dict import load_param_dict, save_param_dict

CASES = int(__import__("os").environ.get("NNVM_FUZZ_CASES", "300"))


def _graph_blob() -> str:
    x = sym.Variable("x", shape=(2, 4))
    y = sym.Variable("y")
    a = sym.relu(x * 2.0) + y
    net = sym.Group([sym.tanh(a), sym.exp(x)])
    return nnvm.graph.create(net).apply(["InferShape", "InferType"], shape_inputs={
        "y": (2, 4)}).json()


def _param_blob() -> bytes:
    return save_param_dict({"w": np.arange(6, dtype="float32").reshape(2, 3),
                            "b": np.array([1, 2], "int8"), "s": np.array(1.5, "float64"),
                            "m": np.array([True, False])})


def _mutate_bytes(blob: bytes, r: random.Random) -> bytes:
    data = bytearray(blob)
    kind = r.randrange(6)
    if kind == 0 and data:  # flip bytes
        for _ in range(r.randint(1, 4)):
            data[r.randrange(len(data))] ^= 1 << r.randrange(8)
    elif kind == 1:  # truncate
        del data[r.randrange(len(data) + 1):]
    elif kind == 2:  # insert junk
        pos = r.randrange(len(data) + 1)
        data[pos:pos] = bytes(r.randrange(256) for _ in range(r.randint(1, 16)))
    elif kind == 3 and data:  # overwrite a run with 0xff or 0x00 (huge or zero counts)
        pos = r.randrange(len(data))
        data[pos:pos + 8] = bytes([r.choice((0, 0xff))]) * 8
    elif kind == 4:  # splice two pieces
        a, b = sorted(r.randrange(len(data) + 1) for _ in range(2))
        data = data[:a] + data[b:] + data[a:b]
    else:  # random bytes
        data = bytearray(r.randrange(256) for _ in range(r.randint(0, 64)))
    return bytes(data)


_JUNK = [None, True, -1, 0, 1, 2**31, 2**70, 1.5, "", "x", "(1, 2)", "null", [], [0], [0, 0],
         [-1, 0], [[0, 0]], {}, {"a": "b"}, ["list_int", [1]], ["list_shape", [[1]]]]


def _mutate_json(obj, r: random.Random):
    """Replace, delete or duplicate one randomly chosen value somewhere in the tree."""
    obj = json.loads(json.dumps(obj))
    containers = []
    stack = [obj]
    while stack:
        c = stack.pop()
        containers.append(c)
        stack.extend(v for v in (c.values() if isinstance(c, dict) else c)
                     if isinstance(v, (dict, list)))
    c = r.choice(containers)
    if not c:
        return obj
    key = r.choice(list(c)) if isinstance(c, dict) else r.randrange(len(c))
    op = r.randrange(3)
    if op == 0:
        c[key] = r.choice(_JUNK)
    elif op == 1:
        del c[key]
    elif isinstance(c, list):
        c.insert(key, c[key])
    else:
        c[key] = [c[key], c[key]]
    return obj


def _check(fn, arg, seed: int) -> None:
    try:
        fn(arg)
    except NNVMError:
        pass
    except Exception as exc:  # noqa: BLE001 - this is what the test is looking for
        pytest.fail(f"seed {seed}: {type(exc).__name__} escaped: {exc!r}")


def test_fuzz_graph_json():
    base = _graph_blob()
    obj = json.loads(base)
    load_json(base)  # the unmutated blob is valid
    for seed in range(CASES):
        r = random.Random(seed)
        if seed % 2:
            text = json.dumps(_mutate_json(obj, r))
            if r.random() < 0.3:
                text = json.dumps(_mutate_json(json.loads(text), r))
        else:
            text = _mutate_bytes(base.encode(), r)
        _check(load_json, text, seed)


def test_fuzz_param_dict():
    base = _param_blob()
    assert set(load_param_dict(base)) == {"w", "b", "s", "m"}
    for seed in range(CASES):
        r = random.Random(seed)
        blob = _mutate_bytes(base, r)
        if r.random() < 0.3:
            blob = _mutate_bytes(blob, r)
        _check(load_param_dict, blob, seed)


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    return buf.getvalue()


def _rehashed(members: dict[str, bytes]) -> dict[str, bytes]:
    try:
        m = json.loads(members["manifest.json"])
        m["members"] = {n: hashlib.sha256(b).hexdigest() for n, b in members.items()
                        if n != "manifest.json"}
        m["manifest_sha256"] = manifest_digest(m)
        return {**members, "manifest.json": json.dumps(m).encode()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return members


def test_fuzz_artifact(tmp_path):
    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.relu(x * sym.Variable("w")), target="reference",
                              shape={"x": (2, 2)}, params={"w": np.ones((2, 2), "float32")},
                              opt_level=0)
    good = tmp_path / "good.nnvm"
    lib.export(str(good))
    base = good.read_bytes()
    with zipfile.ZipFile(good) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    path = tmp_path / "fuzz.nnvm"
    for seed in range(CASES):
        r = random.Random(seed)
        mode = seed % 3
        if mode == 0:  # raw zip bytes: CRCs, directory, local headers
            data = _mutate_bytes(base, r)
        else:  # structured: a member or the manifest changed, hashes recomputed or not
            mutated = dict(members)
            name = r.choice(sorted(mutated))
            if name == "manifest.json":
                mutated[name] = json.dumps(_mutate_json(manifest, r)).encode()
            elif name == "graph.json" and r.random() < 0.5:
                mutated[name] = json.dumps(_mutate_json(json.loads(mutated[name]), r)).encode()
            else:
                mutated[name] = _mutate_bytes(mutated[name], r)
            data = _zip(_rehashed(mutated) if mode == 2 else mutated)
        path.write_bytes(data)
        _check(lambda p: nnvm.runtime.load(p).run(x=np.ones((2, 2), "float32")), str(path),
               seed)
