"""Mutated real artifacts (reference and llvm targets): only NNVMError subclasses come out.

Every case starts from a real export and changes it the ways a damaged disk, a careless
edit or an attacker would: raw bytes of the zip (headers, directory, data), one member's
bytes, one JSON member's structure (types swapped, keys dropped, numbers made huge or
negative, lists emptied or nested deep), param arrays reshaped or retyped. Half the
structured cases recompute every hash and size (as a deliberate edit would), so they reach
the validators behind the hashes rather than stopping at the sha256 check. A case that
loads is also run once.

Not mutated with recomputed hashes: ``lib.so``. It is native code; once its hash matches
it is trusted by design (signed artifacts are the defence there), and a mutated library
may crash the process rather than raise.

Backend members other than native code (the llvm ``executor.json``) are fuzzed with
recomputed hashes separately: their parsing lives in the backend, which must validate them
(``Artifact.json_member`` with a ``nnvm.serialization.schema`` schema) before use.

``NNVM_FUZZ_CASES`` sets the cases per target (default 1500: a few seconds each).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import NNVMError
from nnvm.runtime.artifact import manifest_digest
from nnvm.serialization.param_dict import load_param_dict, save_param_dict

CASES = int(os.environ.get("NNVM_FUZZ_CASES", "1500"))
EXTREMES = [0, -1, 1, 2, 7, 1 << 31, 1 << 40, 10 ** 12, -(1 << 63), (1 << 63) - 1, 1.5,
            float("1e308"), True, None, "", "x", [], {}, [[]], [1, 2], {"a": 1}]
#: backend members whose hashes are never recomputed after a mutation (native code)
NATIVE = {"lib.so"}
#: members core parses and validates; a backend's own JSON members (the llvm executor plan)
#: are fuzzed with recomputed hashes in test_fuzz_llvm_executor_plan
CORE = {"manifest.json", "graph.json", "params.bin"}


def _export(target: str, tmp_path) -> bytes:
    x = sym.Variable("x")
    y = sym.relu(sym.dense(x, units=8, name="fc1"))
    y = sym.softmax(sym.dense(y, units=4, name="fc2"))
    rng = np.random.default_rng(0)
    params = {"fc1_weight": rng.standard_normal((8, 6)).astype("float32"),
              "fc1_bias": rng.standard_normal(8).astype("float32"),
              "fc2_weight": rng.standard_normal((4, 8)).astype("float32"),
              "fc2_bias": rng.standard_normal(4).astype("float32")}
    lib = nnvm.compiler.build(y, target=target, shape={"x": (2, 6)}, params=params)
    path = tmp_path / f"{target}.nnvm"
    lib.export(str(path))
    return path.read_bytes()


def _unzip(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    return buf.getvalue()


def _rehash(members: dict[str, bytes]) -> dict[str, bytes]:
    """Recompute every hash and size, as a deliberate edit would (if the manifest parses)."""
    try:
        m = json.loads(members["manifest.json"])
        body = {n: b for n, b in members.items() if n != "manifest.json"}
        m["members"] = {n: hashlib.sha256(b).hexdigest() for n, b in body.items()}
        m["member_sizes"] = {n: len(b) for n, b in body.items()}
        m["manifest_sha256"] = manifest_digest(m)
        return {**members, "manifest.json": json.dumps(m).encode()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return members


def _mutate_bytes(blob: bytes, r: random.Random) -> bytes:
    b = bytearray(blob)
    for _ in range(r.randrange(1, 5)):
        op, pos = r.random(), r.randrange(len(b) + 1)
        if op < 0.4 and b:
            b[min(pos, len(b) - 1)] ^= 1 << r.randrange(8)
        elif op < 0.55:
            del b[pos:pos + r.randrange(1, 64)]
        elif op < 0.7:
            b[pos:pos] = bytes(r.randrange(256) for _ in range(r.randrange(1, 16)))
        elif op < 0.85:
            del b[pos:]
        else:
            b[pos:pos + 4] = r.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00",
                                       b"\xff\xff\xff\x7f"])
    return bytes(b)


def _mutate_json(obj, r: random.Random, depth: int = 0):
    """Change one spot of a JSON value, picked by a random walk from the root."""
    if isinstance(obj, dict) and obj and depth < 12 and r.random() < 0.8:
        k = r.choice(sorted(obj, key=str))
        out = dict(obj)
        op = r.random()
        if op < 0.12:
            del out[k]
        elif op < 0.2:
            out[k + "_"] = r.choice(EXTREMES)
        else:
            out[k] = _mutate_json(obj[k], r, depth + 1)
        return out
    if isinstance(obj, list) and obj and depth < 12 and r.random() < 0.8:
        i = r.randrange(len(obj))
        out = list(obj)
        op = r.random()
        if op < 0.1:
            del out[i]
        elif op < 0.2:
            out.append(r.choice(out))
        elif op < 0.25:
            out = out * r.randrange(2, 50)
        else:
            out[i] = _mutate_json(obj[i], r, depth + 1)
        return out
    op = r.random()
    if op < 0.1:
        nested = 0
        for _ in range(r.choice([5, 100, 5000])):
            nested = [nested]
        return nested
    if isinstance(obj, int) and not isinstance(obj, bool) and op < 0.6:
        return r.choice([obj + 1, obj - 1, -obj, obj * 1000, 10 ** 12, -1, 0, 1 << 62])
    if isinstance(obj, str) and op < 0.5:
        return r.choice([obj + "x", obj[:-1], "", obj.upper(), "float64", "int8", "0", "1e12"])
    return r.choice(EXTREMES)


def _mutate_params(blob: bytes, r: random.Random) -> bytes:
    params = load_param_dict(blob)
    name = r.choice(sorted(params))
    a = params[name]
    op = r.random()
    if op < 0.25:
        params[name] = a.reshape(-1)[: max(1, a.size // 2)]
    elif op < 0.45:
        params[name] = np.broadcast_to(a.reshape(-1)[:1], (1,) + a.shape[1:]).copy()
    elif op < 0.6:
        params[name] = a.astype(r.choice(["float64", "float16", "int32", "bool"]))
    elif op < 0.75:
        params[name] = a.reshape((1,) + a.shape)
    elif op < 0.85:
        params[name + "_extra"] = a
    elif op < 0.95:
        del params[name]
    else:
        params[name] = np.full(a.shape, np.nan, a.dtype)
    return save_param_dict(params)


def _case(members: dict[str, bytes], base: bytes, r: random.Random) -> bytes:
    mode = r.random()
    if mode < 0.2:
        return _mutate_bytes(base, r)
    mutated = dict(members)
    name = r.choice(sorted(mutated))
    rehash = r.random() < 0.5 and name in CORE
    data = mutated[name]
    if name.endswith(".json") and r.random() < 0.75:
        for _ in range(r.randrange(1, 4)):
            try:
                data = json.dumps(_mutate_json(json.loads(data), r)).encode()
            except (ValueError, RecursionError):
                break
    elif name == "params.bin" and r.random() < 0.6:
        data = _mutate_params(data, r)
    else:
        data = _mutate_bytes(data, r)
    mutated[name] = data
    if r.random() < 0.05:
        mutated.pop(r.choice(sorted(mutated)))
    return _zip(_rehash(mutated) if rehash else mutated)


def _params_off_graph(lib) -> list[str]:
    """Params whose shape or dtype differs from what the module's graph declares."""
    idx = lib.graph.index
    shapes, dtypes = lib.graph.attrs.get("shape"), lib.graph.attrs.get("dtype")
    out = []
    for nid in idx.input_nodes:
        name, e = idx.nodes[nid].name, idx.entry_rptr[nid]
        if name in lib.params and shapes is not None and dtypes is not None:
            a = np.asarray(lib.params[name])
            if a.shape != tuple(shapes[e]) or str(a.dtype) != dtypes[e]:
                out.append(f"{name}: {a.shape} {a.dtype} vs {shapes[e]} {dtypes[e]}")
    return out


def _fuzz(target: str, tmp_path, cases: int, only: str | None = None) -> dict:
    base = _export(target, tmp_path)
    members = _unzip(base)
    path = tmp_path / "fuzz.nnvm"
    xv = np.ones((2, 6), "float32")
    stats = {"refused": 0, "loaded": 0}
    bad = []
    r = random.Random(f"{target}:{only}")
    for i in range(cases):
        if only is None:
            data = _case(members, base, r)
        else:  # one JSON member, mutated structurally, hashes recomputed
            mutated = dict(members)
            try:
                mutated[only] = json.dumps(_mutate_json(json.loads(mutated[only]), r)).encode()
            except RecursionError:
                continue
            data = _zip(_rehash(mutated))
        path.write_bytes(data)
        try:
            lib = nnvm.runtime.load(str(path))
            stats["loaded"] += 1
            lib.run(x=xv)
            wrong = _params_off_graph(lib)
            if wrong:  # loaded, but with a param the graph does not declare (broadcast)
                bad.append(f"case {i}: loaded with {wrong}")
        except NNVMError:
            stats["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - what this test exists to find
            bad.append(f"case {i}: {type(exc).__name__}: {str(exc)[:160]}")
    stats["bad"] = bad
    return stats


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_fuzz_artifact_only_nnvm_errors(target, tmp_path):
    if target == "llvm":
        pytest.importorskip("tvm")
        os.environ.setdefault("NNVM_CACHE_DIR", str(tmp_path / "cache"))
    stats = _fuzz(target, tmp_path, CASES if target == "reference" else CASES // 2)
    assert not stats["bad"], "\n".join(stats["bad"][:20])
    # the fuzzer must get past the hashes often enough to test the validators behind them
    assert stats["refused"] > CASES // 10 and stats["loaded"] > 0, stats


def test_fuzz_llvm_executor_plan(tmp_path):
    """executor.json mutated structurally with every hash recomputed, so each case reaches
    the llvm backend's plan parsing."""
    pytest.importorskip("tvm")
    os.environ.setdefault("NNVM_CACHE_DIR", str(tmp_path / "cache"))
    stats = _fuzz("llvm", tmp_path, CASES // 2, only="executor.json")
    assert not stats["bad"], "\n".join(stats["bad"][:20])
