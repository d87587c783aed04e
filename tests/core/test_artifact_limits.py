"""Hostile artifacts are refused with bounded memory: zip bombs, lying zip headers, overlapping
members, compression methods nnvm never writes; and what nnvm writes always loads.

The bomb is built by hand (a raw deflate stream of 1 GiB of zeros made of repeated full-flush
blocks: about 1 MB, built in milliseconds) and loaded in a subprocess that reports its peak
Python allocation (tracemalloc) and peak RSS growth, so an unbounded reader cannot take the
test process down with it. The assertions are on memory, never on time. The same test run
against the reader before streaming verification used over 1 GiB in every bomb case.
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import SerializationError
from nnvm.runtime.artifact import manifest_digest, read_artifact

GIB = 1 << 30
#: sha256 and crc32 of 1 GiB of zero bytes (constants: computing them takes seconds)
ZEROS_GIB_SHA256 = "49bc20df15e412a64472421e13fe86ff1c5165e18b2afccf160d4dc19fe68a14"
ZEROS_GIB_CRC32 = 0x5B64C2B0
MEMORY_BOUND = 100 << 20


def _deflated_zeros_gib() -> bytes:
    """A raw deflate stream that inflates to exactly 1 GiB of zeros (about 1 MB)."""
    mib = bytes(1 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(mib) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(mib) + c.flush(zlib.Z_FULL_FLUSH)  # identical after a full flush
    last = c.compress(mib) + c.flush(zlib.Z_FINISH)
    return first + block * 1022 + last


def _raw_zip(entries: list[dict]) -> bytes:
    """A zip written field by field, so headers can say what a hostile file would say.

    Each entry: name, data (already compressed), method (0 stored, 8 deflate), crc, size
    (the uncompressed size the headers claim) and optionally csize (the compressed size
    the central directory claims).
    """
    out, central = bytearray(), bytearray()
    for e in entries:
        name = e["name"].encode()
        csize = e.get("csize", len(e["data"]))
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, e["method"], 0, 0x21,
                           e["crc"], len(e["data"]), e["size"], len(name), 0) + name + e["data"]
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, e["method"], 0,
                               0x21, e["crc"], csize, e["size"], len(name), 0, 0, 0, 0, 0,
                               offset) + name
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries),
                       len(central), cd_offset, 0)
    return bytes(out)


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


@pytest.fixture(scope="module")
def real_members(tmp_path_factory) -> dict[str, bytes]:
    """The members of a real exported reference artifact."""
    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.relu(sym.dense(x, units=4, name="fc")), target="reference",
                              shape={"x": (1, 3)},
                              params={"fc_weight": np.ones((4, 3), "float32"),
                                      "fc_bias": np.zeros(4, "float32")}, opt_level=0)
    path = tmp_path_factory.mktemp("real") / "m.nnvm"
    lib.export(str(path))
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _bomb_artifact(real: dict[str, bytes], *, sizes: bool, claimed_size: int = GIB,
                   csize: int | None = None) -> bytes:
    """The real members plus 4 MiB of random padding and a 1 GiB-of-zeros member, with a
    manifest whose hashes are all right (so only limits can stop it): about 5 MB."""
    padding = np.random.default_rng(0).bytes(4 << 20)
    manifest = json.loads(real["manifest.json"])
    manifest["members"].update(padding=hashlib.sha256(padding).hexdigest(),
                               bomb=ZEROS_GIB_SHA256)
    if sizes:
        manifest["member_sizes"].update(padding=len(padding), bomb=claimed_size)
    else:
        manifest.pop("member_sizes", None)
    manifest["manifest_sha256"] = manifest_digest(manifest)
    entries = [{"name": "manifest.json", "data": json.dumps(manifest).encode(), "method": 0}]
    entries[0].update(crc=zlib.crc32(entries[0]["data"]), size=len(entries[0]["data"]))
    for name in ("graph.json", "params.bin"):
        entries.append({"name": name, "data": _deflate(real[name]), "method": 8,
                        "crc": zlib.crc32(real[name]), "size": len(real[name])})
    entries.append({"name": "padding", "data": padding, "method": 0,
                    "crc": zlib.crc32(padding), "size": len(padding)})
    bomb = {"name": "bomb", "data": _deflated_zeros_gib(), "method": 8,
            "crc": ZEROS_GIB_CRC32, "size": claimed_size}
    if csize is not None:
        bomb["csize"] = csize
    entries.append(bomb)
    return _raw_zip(entries)


_PROBE = textwrap.dedent("""
    import json, resource, sys, tracemalloc
    import nnvm
    from nnvm.runtime.artifact import read_artifact
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    try:
        read_artifact(sys.argv[1])
        error, message = None, ""
    except BaseException as exc:
        error, message = type(exc).__name__, str(exc)
    peak = tracemalloc.get_traced_memory()[1]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    print(json.dumps({"error": error, "message": message, "peak": peak, "rss": rss}))
""")


def _probe(path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["sizes", "no_sizes", "lying_header", "lying_csize",
                                  "lying_csize_no_sizes"])
def test_zip_bomb_is_refused_with_bounded_memory(real_members, tmp_path, case):
    """A 1 GiB-when-inflated member in a ~5 MB artifact whose hashes are all right: refused
    with a SerializationError, peak Python allocation and RSS growth under 100 MB."""
    kw = {"sizes": dict(sizes=True), "no_sizes": dict(sizes=False),
          # headers and manifest claim 2600 bytes; the stream inflates to 1 GiB
          "lying_header": dict(sizes=True, claimed_size=2600),
          # the directory claims a compressed size that makes the ratio look harmless
          "lying_csize": dict(sizes=True, csize=20 << 20),
          "lying_csize_no_sizes": dict(sizes=False, csize=5 << 20)}[case]
    path = tmp_path / "bomb.nnvm"
    path.write_bytes(_bomb_artifact(real_members, **kw))
    assert 4 << 20 < path.stat().st_size < 6 << 20
    result = _probe(path)
    assert result["error"] == "SerializationError", result
    assert "bomb" in result["message"], result
    assert result["peak"] < MEMORY_BOUND, result
    assert result["rss"] < MEMORY_BOUND, result


def test_bomb_message_names_the_member_and_the_limit(real_members, tmp_path):
    path = tmp_path / "bomb.nnvm"
    path.write_bytes(_bomb_artifact(real_members, sizes=True))
    with pytest.raises(SerializationError, match=r"member 'bomb'.*zip bomb.*at most 100x.*"
                                                 r"NNVM_ARTIFACT_MAX_RATIO"):
        read_artifact(str(path))


def test_the_bomb_artifact_is_otherwise_well_formed(real_members, tmp_path):
    """The refusals above are the limits' doing: the file is a valid zip whose bomb member
    is a valid deflate stream of zeros (its first 8 MiB checked) and whose manifest digest
    is right."""
    path = tmp_path / "bomb.nnvm"
    path.write_bytes(_bomb_artifact(real_members, sizes=True))
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        assert manifest["manifest_sha256"] == manifest_digest(manifest)
        assert zf.getinfo("bomb").file_size == GIB
        with zf.open("bomb") as f:
            assert f.read(8 << 20) == bytes(8 << 20)
        for name in ("graph.json", "params.bin", "padding"):
            assert hashlib.sha256(zf.read(name)).hexdigest() == manifest["members"][name]


def test_bzip2_and_other_methods_are_refused(real_members, tmp_path):
    path = tmp_path / "bz.nnvm"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as zf:
        for n, b in real_members.items():
            zf.writestr(n, b)
    with pytest.raises(SerializationError, match="unsupported compression method.*stored or "
                                                 "deflate"):
        read_artifact(str(path))


def test_overlapping_members_are_refused(real_members, tmp_path):
    """Two directory entries pointing at the same bytes (the non-recursive zip bomb)."""
    data = json.dumps({"a": 1}).encode()
    blob = _raw_zip([{"name": "manifest.json", "data": data, "method": 0,
                      "crc": zlib.crc32(data), "size": len(data), "csize": 10 << 20}])
    path = tmp_path / "overlap.nnvm"
    path.write_bytes(blob)
    with pytest.raises(SerializationError, match="more compressed bytes than the file holds"):
        read_artifact(str(path))


def test_manifest_records_member_sizes_and_old_artifacts_still_load(real_members, tmp_path):
    manifest = json.loads(real_members["manifest.json"])
    assert manifest["member_sizes"] == {n: len(b) for n, b in real_members.items()
                                        if n != "manifest.json"}
    old = dict(manifest)
    del old["member_sizes"]  # what nnvm wrote before sizes were recorded
    old["manifest_sha256"] = manifest_digest(old)
    path = tmp_path / "old.nnvm"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(old))
        for n in ("graph.json", "params.bin"):
            zf.writestr(n, real_members[n])
    lib = nnvm.runtime.load(str(path))
    np.testing.assert_array_equal(lib.run(x=np.ones((1, 3), "float32"))[0],
                                  np.full((1, 4), 3.0, "float32"))


def test_member_larger_than_its_recorded_size_is_refused_before_inflating(real_members,
                                                                          tmp_path):
    manifest = json.loads(real_members["manifest.json"])
    manifest["member_sizes"]["params.bin"] -= 1
    manifest["manifest_sha256"] = manifest_digest(manifest)
    path = tmp_path / "m.nnvm"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        for n in ("graph.json", "params.bin"):
            zf.writestr(n, real_members[n])
    with pytest.raises(SerializationError, match="'params.bin' fails its sha256 check \\(it "
                                                 "claims"):
        read_artifact(str(path))


def test_highly_compressible_weights_are_stored_so_they_load(tmp_path):
    """A 16 MiB all-zero weight deflates 1000:1; export stores it uncompressed, so the
    artifact nnvm writes loads under the default ratio limit."""
    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.dense(x, units=2048, name="fc"), target="reference",
                              shape={"x": (1, 2048)},
                              params={"fc_weight": np.zeros((2048, 2048), "float32"),
                                      "fc_bias": np.ones(2048, "float32")}, opt_level=0)
    path = tmp_path / "zeros.nnvm"
    lib.export(str(path))
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo("params.bin").compress_type == zipfile.ZIP_STORED
        assert zf.getinfo("graph.json").compress_type == zipfile.ZIP_DEFLATED
    out = nnvm.runtime.load(str(path)).run(x=np.ones((1, 2048), "float32"))[0]
    np.testing.assert_array_equal(out, np.ones((1, 2048), "float32"))


def test_param_shape_must_match_the_graph(real_members, tmp_path):
    """A (1, 3) weight where (4, 3) is declared used to be broadcast silently."""
    from nnvm.serialization.param_dict import save_param_dict

    members = dict(real_members)
    members["params.bin"] = save_param_dict({"fc_weight": np.ones((1, 3), "float32"),
                                             "fc_bias": np.zeros(4, "float32")})
    manifest = json.loads(members["manifest.json"])
    manifest["members"]["params.bin"] = hashlib.sha256(members["params.bin"]).hexdigest()
    manifest["member_sizes"]["params.bin"] = len(members["params.bin"])
    manifest["manifest_sha256"] = manifest_digest(manifest)
    members["manifest.json"] = json.dumps(manifest).encode()
    path = tmp_path / "m.nnvm"
    with zipfile.ZipFile(path, "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    with pytest.raises(SerializationError, match=r"member 'params.bin', param 'fc_weight': "
                                                 r"has a shape other than graph.json declares; "
                                                 r"expected \(4, 3\), got \(1, 3\)"):
        nnvm.runtime.load(str(path))
    members["params.bin"] = save_param_dict({"fc_weight": np.ones((4, 3), "float64"),
                                             "fc_bias": np.zeros(4, "float32")})
    manifest["members"]["params.bin"] = hashlib.sha256(members["params.bin"]).hexdigest()
    manifest["member_sizes"]["params.bin"] = len(members["params.bin"])
    manifest["manifest_sha256"] = manifest_digest(manifest)
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    with pytest.raises(SerializationError, match="dtype other than graph.json declares; "
                                                 "expected float32, got float64"):
        nnvm.runtime.load(str(path))


def test_limits_come_from_the_environment(monkeypatch):
    from nnvm.runtime.artifact import limits

    monkeypatch.setenv("NNVM_ARTIFACT_MAX_RATIO", "7")
    monkeypatch.setenv("NNVM_ARTIFACT_MAX_BYTES", "12345")
    assert limits()["max_ratio"] == 7 and limits()["max_total_bytes"] == 12345
    monkeypatch.setenv("NNVM_ARTIFACT_MAX_RATIO", "-1")
    with pytest.raises(SerializationError, match="NNVM_ARTIFACT_MAX_RATIO.*positive"):
        limits()


def test_json_member_names_member_and_field(real_members):
    """What backends use to read their own JSON members: every failure is a
    SerializationError naming the member and the field, never a raw exception."""
    from nnvm.runtime.artifact import Artifact
    from nnvm.serialization.schema import Int, List, Map, Obj, Shape, Str

    schema = Obj({"version": Int(1, 1),
                  "entries": Map(Obj({"shape": Shape(), "dtype": Str(32)})),
                  "steps": List(Obj({"func": Str(), "args": List(Int(0))}))})
    good = {"version": 1, "entries": {"0": {"shape": [2, 3], "dtype": "float32"}},
            "steps": [{"func": "f", "args": [0, 1]}]}
    cases = {
        "is missing": None,
        "not valid JSON": b"{",
        "NaN": b'{"version": NaN}',
        "not UTF-8": b'{"version": "\xff"}',
        "nested too deep; expected at most 256 levels, got 300": b"[" * 300 + b"]" * 300,
        "not valid JSON \\(RecursionError": b"[" * 100000 + b"]" * 100000,
        "field 'steps\\[0\\].args\\[1\\]'.*expected an int >= 0, got -1":
            json.dumps({**good, "steps": [{"func": "f", "args": [0, -1]}]}).encode(),
        "field 'entries\\['0'\\].shape'.*at most 1099511627776 elements":
            json.dumps({**good, "entries": {"0": {"shape": [10 ** 6, 10 ** 6, 10],
                                                  "dtype": "float32"}}}).encode(),
        "field 'version'.*expected present": json.dumps({"entries": {}, "steps": []}).encode(),
        "field 'extra'.*no such field": json.dumps({**good, "extra": 1}).encode(),
    }
    for match, data in cases.items():
        members = dict(real_members)
        if data is not None:
            members["plan.json"] = data
        art = Artifact({"target": "x"}, members, "m.nnvm")
        with pytest.raises(SerializationError, match="member 'plan.json'.*" + match):
            art.json_member("plan.json", schema)
    members = {**real_members, "plan.json": json.dumps(good).encode()}
    assert Artifact({}, members, "m.nnvm").json_member("plan.json", schema) == good
