"""The .nnvm artifact: round trip, and refusal of any member changed after export."""

from __future__ import annotations

import hashlib
import json
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import BackendUnavailableError, SerializationError
from nnvm.runtime.artifact import FORMAT_VERSION, manifest_digest, read_artifact


@pytest.fixture
def exported(tmp_path, rng):
    """An exported two-output reference module, its path and one input/outputs pair."""
    x = sym.Variable("x")
    w = sym.Variable("w")
    y = sym.relu(x * w + 1.0)
    net = sym.Group([y, sym.tanh(x)])
    wv = rng.standard_normal((2, 3)).astype("float32")
    lib = nnvm.compiler.build(net, target="reference", shape={"x": (2, 3)}, params={"w": wv},
                              opt_level=0)
    path = tmp_path / "model.nnvm"
    lib.export(str(path))
    xv = rng.standard_normal((2, 3)).astype("float32")
    return path, xv, lib.run(x=xv)


def _members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _write(path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)


def _rehash(members: dict[str, bytes]) -> dict[str, bytes]:
    """Recompute every hash, as someone deliberately rewriting the file would."""
    m = json.loads(members["manifest.json"])
    m["members"] = {n: hashlib.sha256(b).hexdigest() for n, b in members.items()
                    if n != "manifest.json"}
    m["manifest_sha256"] = manifest_digest(m)
    return {**members, "manifest.json": json.dumps(m).encode()}


def test_export_load_roundtrip(exported):
    path, xv, want = exported
    lib = nnvm.runtime.load(str(path))
    assert lib.target == "reference" and lib.input_names == ["x"]
    got = lib.run(x=xv)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    names = lib.output_names
    assert len(names) == 2 and names[0].startswith("relu") and names[1].startswith("tanh")


def test_manifest_contents(exported):
    path, _, _ = exported
    members = _members(path)
    assert sorted(members) == ["graph.json", "manifest.json", "params.bin"]
    m = json.loads(members["manifest.json"])
    assert m["format"] == "nnvm-artifact" and m["format_version"] == FORMAT_VERSION
    assert m["target"] == "reference" and m["nnvm_version"] == nnvm.__version__
    assert m["inputs"] == [{"name": "x", "shape": [2, 3], "dtype": "float32"}]
    assert [o["shape"] for o in m["outputs"]] == [[2, 3], [2, 3]]
    for name in ("graph.json", "params.bin"):
        assert m["members"][name] == hashlib.sha256(members[name]).hexdigest()
    assert m["manifest_sha256"] == manifest_digest(m)
    assert "nnvm" in m["plugins"]


def test_export_is_deterministic(exported, tmp_path):
    path, _, _ = exported
    lib = nnvm.runtime.load(str(path))
    again = tmp_path / "again.nnvm"
    lib.export(str(again))
    assert again.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("member", ["params.bin", "graph.json"])
def test_flipped_byte_is_refused(exported, member):
    path, _, _ = exported
    members = _members(path)
    data = bytearray(members[member])
    data[len(data) // 2] ^= 0x01
    members[member] = bytes(data)
    _write(path, members)
    with pytest.raises(SerializationError, match=f"'{member}' fails its sha256"):
        nnvm.runtime.load(str(path))


def test_unlisted_member_is_refused(exported):
    path, _, _ = exported
    members = _members(path)
    members["lib.so"] = b"\x7fELF not really"
    _write(path, members)
    with pytest.raises(SerializationError, match=r"not listed in the manifest: \['lib.so'\]"):
        nnvm.runtime.load(str(path))


def test_missing_member_is_refused(exported):
    path, _, _ = exported
    members = _members(path)
    del members["params.bin"]
    _write(path, members)
    with pytest.raises(SerializationError, match="'params.bin' is missing"):
        nnvm.runtime.load(str(path))


@pytest.mark.parametrize("edit", [
    lambda m: m.update(target="llvm"),
    lambda m: m["inputs"][0].update(shape=[4, 3]),
    lambda m: m.update(nnvm_version="9.9"),
    lambda m: m["members"].update({"graph.json": "0" * 64}),
])
def test_edited_manifest_is_refused(exported, edit):
    path, _, _ = exported
    members = _members(path)
    m = json.loads(members["manifest.json"])
    edit(m)
    members["manifest.json"] = json.dumps(m).encode()
    _write(path, members)
    with pytest.raises(SerializationError, match="manifest.json fails its sha256"):
        nnvm.runtime.load(str(path))


def test_rehashed_manifest_must_still_describe_the_graph(exported):
    """Even with every hash recomputed, the manifest's I/O must match graph.json."""
    path, _, _ = exported
    members = _members(path)
    m = json.loads(members["manifest.json"])
    m["inputs"][0]["shape"] = [4, 3]
    members["manifest.json"] = json.dumps(m).encode()
    _write(path, _rehash(members))
    with pytest.raises(SerializationError, match="inputs do not match graph.json"):
        nnvm.runtime.load(str(path))


def test_hashes_are_checked_before_anything_is_parsed(exported):
    """graph.json that would fail to parse, and params.bin that would too: the error is
    the hash, so neither parser ran on unverified bytes."""
    path, _, _ = exported
    members = _members(path)
    members["graph.json"] = b'{"nodes": [{"op": "no_such_op", "name": "boom"}], "heads": [[0,0]]}'
    members["params.bin"] = b"\x00" * 3
    _write(path, members)
    with pytest.raises(SerializationError, match="fails its sha256"):
        nnvm.runtime.load(str(path))
    # with the hashes recomputed the same bytes reach the parsers, which name the problem
    _write(path, _rehash(members))
    with pytest.raises(nnvm.NNVMError, match="no_such_op|boom|param"):
        nnvm.runtime.load(str(path))


def test_unknown_target_is_a_backend_error(exported):
    path, _, _ = exported
    members = _members(path)
    m = json.loads(members["manifest.json"])
    m["target"] = "no_such_target"
    members["manifest.json"] = json.dumps(m).encode()
    _write(path, _rehash(members))
    with pytest.raises(BackendUnavailableError, match="no_such_target"):
        nnvm.runtime.load(str(path))


@pytest.mark.parametrize("content, match", [
    (None, "file not found"),
    (b"", "not a zip"),
    (b"hello world" * 10, "not a zip"),
])
def test_not_an_artifact(tmp_path, content, match):
    path = tmp_path / "x.nnvm"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SerializationError, match=match):
        nnvm.runtime.load(str(path))


def test_directory_and_zip_without_manifest(tmp_path):
    with pytest.raises(SerializationError):
        nnvm.runtime.load(str(tmp_path))
    path = tmp_path / "a.nnvm"
    _write(path, {"graph.json": b"{}"})
    with pytest.raises(SerializationError, match="no manifest.json"):
        read_artifact(str(path))


def test_format_version_mismatch(exported):
    path, _, _ = exported
    members = _members(path)
    m = json.loads(members["manifest.json"])
    m["format_version"] = FORMAT_VERSION + 1
    m["manifest_sha256"] = manifest_digest(m)
    members["manifest.json"] = json.dumps(m).encode()
    _write(path, members)
    with pytest.raises(SerializationError, match="format version"):
        nnvm.runtime.load(str(path))


def test_duplicate_member_names_refused(exported, tmp_path):
    path, _, _ = exported
    members = _members(path)
    dup = tmp_path / "dup.nnvm"
    with pytest.warns(UserWarning), zipfile.ZipFile(dup, "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)
        zf.writestr("graph.json", b"{}")
    with pytest.raises(SerializationError, match="duplicate"):
        nnvm.runtime.load(str(dup))
