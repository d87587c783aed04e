"""``NNVM_CACHE_DIR=off`` means "no disk cache" for every package (``nnvm.cache_dirs``).

The bug this guards: packages other than the llvm backend read the variable as a path, so a
run with ``NNVM_CACHE_DIR=off`` created a folder named ``off`` in the current directory.
Here the shared rule itself, and an ``InferenceSession`` built and run with the cache off in
an empty current directory and an empty home: neither may gain a file.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from cache_env import files
from nnvm import cache_dirs



@pytest.mark.parametrize("value", ["off", "OFF", "Off", "0", "none", "None", "false",
                                   "FALSE", " off "])
def test_off_values_disable_every_cache(monkeypatch, value):
    monkeypatch.setenv("NNVM_CACHE_DIR", value)
    assert cache_dirs.disabled()
    assert cache_dirs.cache_root() is None
    assert cache_dirs.cache_root(default="/somewhere") is None
    assert cache_dirs.package_dir("opencl") is None


@pytest.mark.parametrize("value", [None, ""])
def test_unset_means_the_home_cache(monkeypatch, tmp_path, value):
    monkeypatch.setenv("HOME", str(tmp_path))
    if value is None:
        monkeypatch.delenv("NNVM_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("NNVM_CACHE_DIR", value)
    root = os.path.join(str(tmp_path), ".cache", "nnvm")
    assert not cache_dirs.disabled()
    assert cache_dirs.cache_root() == root
    assert cache_dirs.package_dir("cuda") == os.path.join(root, "cuda")
    assert cache_dirs.cache_root(default="/own/default") == "/own/default"
    assert not os.listdir(tmp_path)  # asking creates nothing


@pytest.mark.parametrize("value", ["offline", "/tmp/off", "0x", "cache"])
def test_any_other_value_is_a_folder(monkeypatch, value):
    monkeypatch.setenv("NNVM_CACHE_DIR", value)
    assert not cache_dirs.disabled()
    assert cache_dirs.cache_root() == value
    assert cache_dirs.cache_root(default="/own/default") == value
    assert cache_dirs.package_dir("sessions") == os.path.join(value, "sessions")



@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_session_with_the_cache_off_writes_nothing(cache_off, target):
    onnx = pytest.importorskip("onnx")
    if target == "llvm":
        pytest.importorskip("tvm")
        from nnvm_llvm.compiler import cache

        cache.clear_memory()
    from onnx import TensorProto, helper

    import nnvm

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert onnx.checker.check_model(model) is None
    sess = nnvm.InferenceSession(model.SerializeToString(), target=target)
    assert sess._cache is None  # the no-disk-cache path, not a folder named "off"
    feed = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    np.testing.assert_array_equal(sess.run(None, {"x": feed})[0], np.maximum(feed, 0))
    work, home = cache_off
    assert files(work) == [] and not os.path.exists(work / "off")
    assert files(home) == []


def test_a_named_session_folder_still_wins(cache_off, tmp_path):
    """``cache_dir=`` is the caller's explicit choice: it is used even under ``off``."""
    from nnvm.session import _cache_root

    assert _cache_root(None) is None
    assert _cache_root(str(tmp_path / "mine")) == str(tmp_path / "mine" / "sessions")
