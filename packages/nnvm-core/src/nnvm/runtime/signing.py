"""Signed artifacts: Ed25519 signatures over the manifest, and a trust policy for loading.

Why: the sha256s in ``manifest.json`` detect corruption, not forgery (whoever can rewrite the
file can rewrite the hashes), and an ``llvm`` artifact carries native code that runs when it
is loaded. A deployment that loads models from a shared folder or a download needs to know
*who* built the file. So:

- ``nnvm keygen -o KEY`` writes an Ed25519 key pair (``KEY``, PKCS#8 PEM, mode 0600, and
  ``KEY.pub``, one OpenSSH line);
- ``nnvm compile ... --sign KEY`` / ``nnvm sign MODEL.nnvm --key KEY`` /
  ``module.export(path, sign_key=KEY)`` add a member ``manifest.sig``: the signature of the
  manifest's canonical JSON, which lists every other member's sha256 and size, so one
  signature covers the whole file;
- a **trust policy** is set by ``nnvm.runtime.load(path, trusted_keys=[...])`` or the
  environment variable ``NNVM_TRUSTED_KEYS`` (public key files or folders of ``*.pub``,
  separated by ``os.pathsep``). With a policy, ``read_artifact`` refuses an unsigned file, a
  bad signature, or a key outside the policy, right after reading the manifest: before any
  other member is read, before the backend is looked up, so no native code is ever mapped.
  Without a policy, signatures are not checked (``nnvm verify`` checks one on demand).

The cryptography is the ``cryptography`` package (OpenSSL's Ed25519), installed by the
``nnvm-core[sign]`` extra and imported only when a key or a policy is used. What is *not*
promised: key distribution and revocation are the user's (a trust store is a folder of public
keys); a signature says who built the file, not that the model is benign.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any, Iterable

from ..errors import NNVMError, SerializationError, format_error

#: the signature member; not listed in the manifest (it signs the manifest)
SIGNATURE_MEMBER = "manifest.sig"
ALGORITHM = "ed25519"
#: the environment variable naming the trust store
TRUST_ENV = "NNVM_TRUSTED_KEYS"


class SignatureError(SerializationError):
    """An artifact is unsigned, wrongly signed or signed by an untrusted key, under a trust
    policy; or a key file cannot be used."""


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise NNVMError(format_error(
            "artifact signing", "the 'cryptography' package is not installed",
            fix="pip install 'nnvm-core[sign]'")) from None
    return serialization, ed25519


def manifest_bytes(manifest: dict) -> bytes:
    """The exact bytes a signature covers: the canonical JSON of the whole manifest."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True).encode("ascii")


def key_id(public_key: Any) -> str:
    """A short, stable name for a public key: sha256 of its raw 32 bytes, 16 hex digits."""
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


# -- keys ---------------------------------------------------------------------------------------

def generate_keypair(path: str) -> tuple[str, str]:
    """Write a new private key to ``path`` (0600) and its public key to ``path + '.pub'``.

    Refuses to overwrite an existing private key (losing one cannot be undone).
    """
    serialization, ed25519 = _crypto()
    if os.path.exists(path):
        raise NNVMError(format_error(f"nnvm keygen {path!r}", "the file exists",
                                     fix="Choose another path or delete the old key first"))
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                        serialization.PublicFormat.OpenSSH)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        with open(path + ".pub", "wb") as f:
            f.write(pub + f" nnvm-{key_id(key.public_key())}\n".encode())
    except OSError as exc:
        raise NNVMError(format_error(f"nnvm keygen {path!r}", "cannot write the key",
                                     got=exc.strerror or str(exc),
                                     fix="Give a path in an existing, writable folder")
                        ) from None
    return path, path + ".pub"


def _key_bytes(key: Any, what: str) -> tuple[bytes, str]:
    """(the key's bytes, how to name it in errors) for a path or raw bytes."""
    if isinstance(key, bytes):
        return key, what
    path = os.fspath(key)
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16), f"{what} {path!r}"
    except OSError as exc:
        raise SignatureError(format_error(f"{what} {path!r}", "cannot read the key file",
                                          got=exc.strerror or str(exc),
                                          fix="Give the path of a key made by nnvm keygen")
                             ) from None


def _check_type(loaded: Any, cls: type, where: str):
    if not isinstance(loaded, cls):
        raise SignatureError(format_error(where, "has the wrong key type", "Ed25519",
                                          type(loaded).__name__,
                                          fix="Make a key with nnvm keygen"))
    return loaded


def load_private_key(key: Any):
    """An Ed25519 private key from a PEM file path, PEM bytes or a key object."""
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    data, where = _key_bytes(key, "signing key")
    try:
        loaded = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SignatureError(format_error(where, "is not an unencrypted PEM private key",
                                          got=str(exc).split("\n")[0][:120],
                                          fix="Use the private key written by nnvm keygen "
                                              "(not the .pub file)")) from None
    return _check_type(loaded, ed25519.Ed25519PrivateKey, where)


def load_public_key(key: Any):
    """An Ed25519 public key from an OpenSSH line or PEM (file path or bytes) or a key."""
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    data, where = _key_bytes(key, "trusted key")
    try:
        if data.lstrip().startswith(b"ssh-"):
            loaded = serialization.load_ssh_public_key(b" ".join(data.split()[:2]))
        else:
            loaded = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, IndexError) as exc:
        raise SignatureError(format_error(where, "is not a public key",
                                          "an 'ssh-ed25519 ...' line or a PEM public key",
                                          str(exc).split("\n")[0][:120],
                                          fix="Use the .pub file written by nnvm keygen"))\
            from None
    return _check_type(loaded, ed25519.Ed25519PublicKey, where)


def trust_policy(trusted_keys: Iterable[Any] | None = None) -> dict | None:
    """``{key id: public key}`` from ``trusted_keys`` or, when None, ``NNVM_TRUSTED_KEYS``;
    None when neither sets a policy (signatures are then not required)."""
    if trusted_keys is None:
        env = os.environ.get(TRUST_ENV, "").strip()
        if not env:
            return None
        trusted_keys = []
        for entry in filter(None, env.split(os.pathsep)):
            if os.path.isdir(entry):
                trusted_keys += [os.path.join(entry, n) for n in sorted(os.listdir(entry))
                                 if n.endswith(".pub")]
            else:
                trusted_keys.append(entry)
        if not trusted_keys:
            raise SignatureError(format_error(
                TRUST_ENV, "names no public key", "*.pub files or folders holding them",
                env, fix="Put the signers' .pub files there, or unset the variable"))
    if isinstance(trusted_keys, (str, bytes, os.PathLike)):
        trusted_keys = [trusted_keys]
    keys = [load_public_key(k) for k in trusted_keys]
    return {key_id(k): k for k in keys}


# -- signing and verifying ----------------------------------------------------------------------

def signature_record(manifest: dict, private_key: Any) -> bytes:
    """The ``manifest.sig`` member for ``manifest`` signed with ``private_key``."""
    key = load_private_key(private_key)
    sig = key.sign(manifest_bytes(manifest))
    return json.dumps({"algorithm": ALGORITHM, "key_id": key_id(key.public_key()),
                       "signature": base64.b64encode(sig).decode("ascii")},
                      indent=1).encode()


def verify(manifest: dict, record: bytes | None, policy: dict, where: str) -> str:
    """Check ``record`` (the ``manifest.sig`` bytes, None when absent) against ``policy``;
    return the signer's key id. Raises ``SignatureError`` naming what is wrong and the fix."""
    from cryptography.exceptions import InvalidSignature

    trusted = ", ".join(sorted(policy)) or "none"
    if record is None:
        raise SignatureError(format_error(
            where, "is not signed, and a trust policy is set", f"a signature by one of "
            f"[{trusted}]", "no manifest.sig member",
            fix="Sign it with nnvm sign MODEL.nnvm --key KEY, or load it without a policy "
                f"(unset {TRUST_ENV}) if you trust its source"))
    try:
        rec = json.loads(record)
        if not isinstance(rec, dict) or rec.get("algorithm") != ALGORITHM:
            raise ValueError(f"algorithm {rec.get('algorithm') if isinstance(rec, dict) else rec!r}")
        kid = str(rec["key_id"])
        sig = base64.b64decode(rec["signature"], validate=True)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
        raise SignatureError(format_error(f"{where}, member '{SIGNATURE_MEMBER}'",
                                          "is malformed", f"an {ALGORITHM} signature record",
                                          str(exc)[:120], fix="Re-sign the file")) from None
    key = policy.get(kid)
    if key is None:
        raise SignatureError(format_error(
            where, "is signed by a key outside the trust policy", f"one of [{trusted}]", kid,
            fix="Add the signer's .pub file to the trusted keys if you trust them"))
    try:
        key.verify(sig, manifest_bytes(manifest))
    except InvalidSignature:
        raise SignatureError(format_error(
            where, f"fails its signature check (key {kid})",
            fix="The file was modified after it was signed; do not load it")) from None
    return kid
