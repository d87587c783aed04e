"""A trust policy refuses a forged ``llvm`` artifact before its native code is mapped.

The forged ``lib.so`` has an ELF constructor that writes a marker file: it runs the moment a
loader maps the library. Without a policy the forgery (hashes rewritten) loads and the
marker appears, which proves the test can see native code run; with a policy it is refused
and the marker never appears.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytest.importorskip("cryptography", reason="signing needs nnvm-core[sign] (cryptography)")
pytest.importorskip("tvm", reason="building an llvm artifact needs apache-tvm")

import nnvm  # noqa: E402
from nnvm import sym  # noqa: E402
from nnvm.runtime.signing import SignatureError, generate_keypair  # noqa: E402
from nnvm.testing.forge import rewrite_member  # noqa: E402

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build the forged library")

SOURCE = r"""
#include <stdio.h>
__attribute__((constructor)) static void nnvm_test_marker(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("native code ran", f); fclose(f); }
}
"""


def _forged_lib(tmp_path, marker) -> bytes:
    src = tmp_path / "forged.c"
    src.write_text(SOURCE % marker)
    out = tmp_path / "forged.so"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out.read_bytes()


def test_policy_refuses_forged_native_code_before_mapping(tmp_path):
    key, pub = generate_keypair(str(tmp_path / "k"))
    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.relu(x), target="llvm", shape={"x": (4,)})
    signed = str(tmp_path / "signed.nnvm")
    lib.export(signed, sign_key=key)
    assert nnvm.runtime.load(signed, trusted_keys=pub) is not None

    marker = tmp_path / "marker.txt"
    forged = str(tmp_path / "forged.nnvm")
    rewrite_member(signed, forged, "lib.so", _forged_lib(tmp_path, marker))

    with pytest.raises(SignatureError, match="fails its signature check"):
        nnvm.runtime.load(forged, trusted_keys=pub)
    assert not marker.exists()

    # control: with no policy the forgery's hashes pass and its code runs when mapped
    try:
        nnvm.runtime.load(forged, trusted_keys=())
    except nnvm.NNVMError:
        pass  # the forged library lacks the kernels; what matters is that it was mapped
    assert marker.read_text() == "native code ran"
