"""The fixed cost of a kernel call on llvm: the C executor calls each kernel's own symbol.

A tvm_ffi Function made from a library symbol wraps it in a C++ closure (exception guard,
result check), about 3-4 ns of a one-element kernel's call; ``lib.run()``'s C executor calls
the symbol ``__tvm_ffi_<name>`` directly with ``self`` NULL, as the exported C library does
(``nnvm_llvm.runtime.executor.kernel_symbols``). Checked here: the symbols are used and lie
in the model's own library, the results are the bits of the per-kernel Python loop, the
Function is called where no symbol can be had, the library still unloads with its module,
and wrong inputs are still refused at the model boundary, naming the input.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend
from nnvm.testing import models

REASON = get_backend("llvm", require_available=False).compiler_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


def _c_executor_or_skip():
    from nnvm_llvm.runtime import c_executor

    if c_executor.library() is None:
        pytest.skip(f"no C executor here: {c_executor.reason()}")


def _small_cnn(monkeypatch, executor: str = "auto"):
    monkeypatch.setenv("NNVM_LLVM_EXECUTOR", executor)
    net, params, shapes = models.MODELS["small_cnn"]()
    lib = nnvm.compiler.build(net, target="llvm", shape=shapes, params=params)
    rng = np.random.default_rng(7)
    return lib, {k: rng.standard_normal(s).astype("float32") for k, s in shapes.items()}


def _mapping_of(address: int) -> str:
    """The /proc/self/maps path of the mapping holding ``address`` ('' if none)."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            lo, hi = (int(v, 16) for v in parts[0].split("-"))
            if lo <= address < hi:
                return parts[5].strip() if len(parts) == 6 else ""
    return ""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_kernels_are_called_through_their_own_symbols(monkeypatch):
    from nnvm_llvm.runtime.executor import kernel_symbols

    _c_executor_or_skip()
    lib, feed = _small_cnn(monkeypatch)
    loop, _ = _small_cnn(monkeypatch, "python")
    assert lib._kernel_calls == "symbol"
    for _ in range(2):
        for a, b in zip(lib.run(**feed), loop.run(**feed)):
            assert a.tobytes() == b.tobytes()
    names = sorted({s["func"] for s in lib._plan["steps"] if s["kind"] == "kernel"})
    ours, theirs = kernel_symbols(lib._lib, names), kernel_symbols(loop._lib, names)
    assert len(set(ours)) == len(names)
    for a, b in zip(ours, theirs):  # same kernels, each model's own library
        assert a != b and "nnvm-llvm-lib" in _mapping_of(a) and _mapping_of(a) != ""
    assert kernel_symbols(lib._lib, names + ["no_such_kernel"]) is None


def test_without_symbols_the_function_is_called(monkeypatch):
    from nnvm_llvm.runtime import executor

    _c_executor_or_skip()
    lib, feed = _small_cnn(monkeypatch)
    monkeypatch.setattr(executor, "kernel_symbols", lambda lib, names: None)
    fallback, _ = _small_cnn(monkeypatch)
    assert (lib._kernel_calls, fallback._kernel_calls) == ("symbol", "function")
    for a, b in zip(lib.run(**feed), fallback.run(**feed)):
        assert a.tobytes() == b.tobytes()
    assert fallback.benchmark(repeat=3, warmup=1) > 0


def test_symbols_of_a_library_loaded_from_a_private_dir(tmp_path, monkeypatch):
    """Without memfd the library is loaded from a file removed right after dlopen: its
    symbols are still found (by the name dlopen knows), and the library still unloads."""
    from nnvm_llvm.runtime import executor

    _c_executor_or_skip()
    x = sym.Variable("x")
    y = sym.exp(sym.relu(x) * 0.5)
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setenv("NNVM_NATIVE_DIR", str(tmp_path / "native"))
    lib = nnvm.compiler.build(y, target="llvm", shape={"x": (3, 5)})
    assert executor.last_load_method == str(tmp_path / "native")
    assert lib._kernel_calls == "symbol"
    xv = np.linspace(-2, 2, 15, dtype="float32").reshape(3, 5)
    np.testing.assert_allclose(lib.run(x=xv)[0], np.exp(np.maximum(xv, 0) * 0.5), rtol=1e-6)
    name = lib._plan["steps"][0]["func"]
    address = executor.kernel_symbols(lib._lib, [name])[0]
    assert str(tmp_path / "native") in _mapping_of(address)
    del lib
    gc.collect()
    assert _mapping_of(address) == "" or str(tmp_path) not in _mapping_of(address)


def test_only_a_library_loaded_by_the_runtime_gives_symbols():
    from nnvm_llvm.runtime import c_executor
    from nnvm_llvm.runtime.executor import kernel_symbols

    exe = c_executor.library()  # loaded by load_library too
    if exe is None:
        pytest.skip(f"no C executor here: {c_executor.reason()}")
    assert isinstance(kernel_symbols(exe, ["nnvm_exec_run"])[0], int)
    assert kernel_symbols(object(), ["nnvm_exec_run"]) is None


@pytest.mark.parametrize("value, what", [
    (np.zeros((2, 4), "float32"), "shape"),
    (np.zeros((8, 4), "float64"), "dtype"),
])
def test_a_wrong_input_is_refused_at_the_model_boundary(value, what):
    """Kernels trust the executor's tensors: a wrong input never reaches them."""
    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.relu(x), target="llvm", shape={"x": (8, 4)})
    with pytest.raises(nnvm.NNVMError, match=rf"(?s)input 'x'.*{what}"):
        lib.run(x=value)
    with pytest.raises(nnvm.NNVMError, match=rf"(?s)input 'x'.*{what}"):
        lib.set_input("x", value)
