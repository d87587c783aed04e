"""Signed artifacts (issue 16): keygen, sign, verify, and the trust policy at load time."""

from __future__ import annotations

import os
import zipfile

import pytest

pytest.importorskip("cryptography", reason="signing needs nnvm-core[sign] (cryptography)")

import nnvm  # noqa: E402
from nnvm import sym  # noqa: E402
from nnvm.errors import SerializationError  # noqa: E402
from nnvm.runtime.artifact import read_artifact, sign_artifact  # noqa: E402
from nnvm.runtime.signing import SignatureError, generate_keypair  # noqa: E402
from cli_helpers import error_line, run_cli  # noqa: E402
from nnvm.testing.forge import rewrite_member  # noqa: E402


@pytest.fixture
def keys(tmp_path):
    a = generate_keypair(str(tmp_path / "alice.key"))
    b = generate_keypair(str(tmp_path / "bob.key"))
    return {"alice": a, "bob": b}


@pytest.fixture
def module():
    x = sym.Variable("x")
    return nnvm.compiler.build(sym.relu(x), target="reference", shape={"x": (2, 3)})


def test_keygen_writes_private_0600_and_refuses_overwrite(tmp_path, keys):
    priv, pub = keys["alice"]
    assert os.stat(priv).st_mode & 0o777 == 0o600
    assert open(pub).read().startswith("ssh-ed25519 ")
    with pytest.raises(nnvm.NNVMError, match="exists"):
        generate_keypair(priv)


def test_signed_artifact_loads_under_policy_and_names_signer(tmp_path, keys, module):
    path = str(tmp_path / "m.nnvm")
    module.export(path, sign_key=keys["alice"][0])
    art = read_artifact(path, trusted_keys=[keys["alice"][1], keys["bob"][1]])
    assert art.signer and len(art.signer) == 16
    m = nnvm.runtime.load(path, trusted_keys=keys["alice"][1])
    assert m.run(x=-1 * __import__("numpy").ones((2, 3), "float32"))[0].max() == 0
    # without a policy the signature is simply not required
    assert read_artifact(path, trusted_keys=()).signer is None


def test_unsigned_wrong_key_and_tampered_are_refused(tmp_path, keys, module):
    plain = str(tmp_path / "plain.nnvm")
    module.export(plain)
    with pytest.raises(SignatureError, match="not signed"):
        nnvm.runtime.load(plain, trusted_keys=keys["alice"][1])
    signed = str(tmp_path / "signed.nnvm")
    assert len(sign_artifact(plain, keys["bob"][0], signed)) == 16
    with pytest.raises(SignatureError, match="outside the trust policy"):
        nnvm.runtime.load(signed, trusted_keys=keys["alice"][1])
    # edit a member and fix every sha256: the hashes pass, the signature does not
    tampered = str(tmp_path / "tampered.nnvm")
    graph = read_artifact(signed, ()).members["graph.json"]
    rewrite_member(signed, tampered, "graph.json", graph + b" ")
    assert read_artifact(tampered, ()).graph() is not None  # hashes alone cannot tell
    with pytest.raises(SignatureError, match="fails its signature check"):
        nnvm.runtime.load(tampered, trusted_keys=keys["bob"][1])


def test_policy_from_environment(tmp_path, keys, module, monkeypatch):
    path = str(tmp_path / "m.nnvm")
    module.export(path, sign_key=keys["alice"][0])
    keydir = tmp_path / "trusted"
    keydir.mkdir()
    (keydir / "bob.pub").write_text(open(keys["bob"][1]).read())
    monkeypatch.setenv("NNVM_TRUSTED_KEYS", str(keydir))
    with pytest.raises(SignatureError, match="outside the trust policy"):
        nnvm.runtime.load(path)
    (keydir / "alice.pub").write_text(open(keys["alice"][1]).read())
    assert nnvm.runtime.load(path) is not None
    monkeypatch.setenv("NNVM_TRUSTED_KEYS", str(tmp_path / "empty-nothing"))
    with pytest.raises(SignatureError, match="cannot read the key file"):
        nnvm.runtime.load(path)


def test_malformed_signature_and_bad_keys(tmp_path, keys, module):
    path = str(tmp_path / "m.nnvm")
    module.export(path)
    bad = str(tmp_path / "bad.nnvm")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for i in src.infolist():
            dst.writestr(i.filename, src.read(i.filename))
        dst.writestr("manifest.sig", b'{"algorithm": "rsa"}')
    with pytest.raises(SignatureError, match="malformed"):
        nnvm.runtime.load(bad, trusted_keys=keys["alice"][1])
    with pytest.raises(SignatureError, match="not a public key"):
        nnvm.runtime.load(path, trusted_keys=keys["alice"][0])  # the private key by mistake
    with pytest.raises(SignatureError, match="not an unencrypted PEM private key"):
        module.export(str(tmp_path / "x.nnvm"), sign_key=keys["alice"][1])


def test_cli_keygen_compile_sign_verify(capsys, tmp_path):
    key = tmp_path / "k"
    assert run_cli(capsys, "keygen", "-o", key)[0] == 0
    graph = tmp_path / "relu.json"
    x = sym.Variable("x")
    graph.write_text(nnvm.graph.create(sym.relu(x)).json())
    out = tmp_path / "relu.nnvm"
    code, _, err = run_cli(capsys, "compile", graph, "--shape", "x=2,2", "--target",
                           "reference", "--sign", key, "-o", out, "-q")
    assert code == 0, err
    code, stdout, _ = run_cli(capsys, "verify", out, "--trusted-key", f"{key}.pub")
    assert code == 0 and "signed by trusted key" in stdout
    other = tmp_path / "other"
    run_cli(capsys, "keygen", "-o", other)
    code, _, err = run_cli(capsys, "verify", out, "--trusted-key", f"{other}.pub")
    assert code != 0 and "outside the trust policy" in error_line(err)
    code, _, err = run_cli(capsys, "verify", out)
    assert code != 0 and "no trust policy" in error_line(err)
    code, _, err = run_cli(capsys, "compile", graph, "--shape", "x=2,2", "--sign",
                           tmp_path / "missing.key", "-o", out, "-q")
    assert code != 0 and "cannot read the key file" in error_line(err)
    assert run_cli(capsys, "sign", out, "--key", other)[0] == 0
    assert run_cli(capsys, "verify", out, "--trusted-key", f"{other}.pub")[0] == 0
