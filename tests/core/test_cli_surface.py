"""The CLI surface of issue 17: what users of onnxruntime, TVM and the original NNVM expect.

``python -m nnvm``; no option abbreviations; ``--debug`` anywhere (and the printed hint
works); ``.npz`` inputs; bench percentiles, throughput and ``--threads``; did-you-mean and
the package of a missing target; invalid llvm options refused before compiling; a clear
error for an unwritable ``-o``; the exit codes documented where users look.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import nnvm
from nnvm import cli, plugin_manager, sym
from nnvm.backend import build_reason, get_backend
from nnvm.errors import BackendUnavailableError, SerializationError
from cli_helpers import error_line as _error_line, run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(__file__).parent / "data"


def error_line(err: str) -> str:
    return _error_line(err, only_progress_before=False)


def llvm_reason() -> str | None:
    try:
        return build_reason(get_backend("llvm", require_available=False))
    except BackendUnavailableError as exc:
        return str(exc)


@pytest.fixture
def two_input_artifact(tmp_path):
    """``relu(x) + y`` on reference: two named inputs, so binding by name is observable."""
    x, y = sym.Variable("x"), sym.Variable("y")
    lib = nnvm.compiler.build(sym.relu(x) + y, target="reference",
                              shape={"x": (2, 5), "y": (2, 5)}, opt_level=0)
    path = tmp_path / "two.nnvm"
    lib.export(str(path))
    return path


@pytest.fixture
def mlp_params(tmp_path, rng):
    params = {"fc1_weight": rng.standard_normal((16, 8)), "fc1_bias": rng.standard_normal(16),
              "fc2_weight": rng.standard_normal((4, 16)), "fc2_bias": rng.standard_normal(4)}
    path = tmp_path / "mlp.params"
    path.write_bytes(nnvm.compiler.save_param_dict(
        {k: v.astype("float32") for k, v in params.items()}))
    return path


# -- python -m nnvm ---------------------------------------------------------------------------

def test_python_dash_m_nnvm(tmp_path, two_input_artifact):
    np.savez(tmp_path / "in.npz", x=np.ones((2, 5), "float32"), y=np.ones((2, 5), "float32"))
    proc = subprocess.run([sys.executable, "-m", "nnvm", "run", str(two_input_artifact),
                           "--input", str(tmp_path / "in.npz"), "--json", "-q"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs"][0]["shape"] == [2, 5]
    proc = subprocess.run([sys.executable, "-m", "nnvm", "run", str(tmp_path / "nope.nnvm")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == cli.EXIT_ERROR and "not found" in error_line(proc.stderr)


# -- no abbreviations -------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["compile", str(DATA / "nnvm_mlp.json"), "--shap", "x=1,8"],
    ["run", "model.nnvm", "--rand"],
    ["bench", "model.nnvm", "--rep", "3"],
    ["plugins", "--js"],
    ["--deb", "plugins"],
])
def test_abbreviated_options_are_errors(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


class _SurfacePlugin:
    """A real plugin adding two subcommands: one with an option, one that fails with a
    plain exception (what a plugin bug looks like to the CLI)."""

    @nnvm.hookimpl
    def nnvm_add_cli_commands(self, subparsers):
        p = subparsers.add_parser("greet", help="say hello (test plugin)")
        p.add_argument("--who", default="world")
        p.set_defaults(func=lambda args: print(f"hello {args.who}") or 0)
        p = subparsers.add_parser("explode", help="fail with a bug (test plugin)")
        p.set_defaults(func=_explode)


def _explode(args):
    raise RuntimeError("plugin bug on purpose")


@pytest.fixture
def surface_plugin():
    plugin_manager.register_plugin(_SurfacePlugin(), "test-cli-surface")
    yield
    plugin_manager.get_plugin_manager().unregister(name="test-cli-surface")
    plugin_manager._infos.pop("test-cli-surface", None)
    plugin_manager._unprobed.pop("test-cli-surface", None)  # probed lazily by plugins()


def test_plugin_subcommands_refuse_abbreviations_and_take_debug(capsys, surface_plugin):
    assert cli.main(["greet", "--who", "nnvm", "--debug"]) == 0
    assert capsys.readouterr().out == "hello nnvm\n"
    with pytest.raises(SystemExit) as exc:
        cli.main(["greet", "--wh", "nnvm"])
    assert exc.value.code == 2


# -- --debug anywhere, and the hint works as printed ----------------------------------------------

@pytest.mark.parametrize("argv", [["--debug", "run", "missing.nnvm"],
                                  ["run", "missing.nnvm", "--debug"]])
def test_debug_before_or_after_the_subcommand(argv):
    with pytest.raises(SerializationError):
        cli.main(argv)


def test_internal_error_hint_reruns_as_printed(capsys, surface_plugin):
    code, _, err = run_cli(capsys, "explode")
    assert code == cli.EXIT_INTERNAL
    line = err.strip().splitlines()[-1]
    assert "internal error: RuntimeError: plugin bug on purpose" in line
    assert "rerun with --debug" in line
    for argv in (["explode", "--debug"], ["--debug", "explode"]):  # as the hint says
        with pytest.raises(RuntimeError, match="plugin bug on purpose"):
            cli.main(argv)


# -- .npz inputs --------------------------------------------------------------------------------

def test_npz_binds_every_array_by_name(capsys, tmp_path, two_input_artifact):
    x = np.array([[-1, 2, -3, 4, -5]] * 2, "float32")
    y = np.full((2, 5), 10, "float32")
    np.savez(tmp_path / "in.npz", y=y, x=x)  # archive order differs from input order
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "run", two_input_artifact, "--input", tmp_path / "in.npz",
                             "--output-dir", out_dir, "-q")
    assert code == 0, err
    (npy,) = out_dir.glob("*.npy")
    np.testing.assert_array_equal(np.load(npy), np.maximum(x, 0) + y)


def test_run_refuses_another_dtype_unless_cast(capsys, tmp_path, two_input_artifact):
    """float64 .npy files (NumPy's default) into float32 inputs: refused with the fix, as
    onnxruntime does; ``--cast`` opts into the conversion."""
    x = np.array([[-1, 2, -3, 4, -5]] * 2, "float64")
    np.savez(tmp_path / "in.npz", x=x, y=np.ones((2, 5), "float64"))
    code, _, err = run_cli(capsys, "run", two_input_artifact, "--input", tmp_path / "in.npz",
                           "-q")
    assert code != 0 and "float64" in error_line(err) and "--cast" in error_line(err)
    out_dir = tmp_path / "out"
    code, _, err = run_cli(capsys, "run", two_input_artifact, "--input", tmp_path / "in.npz",
                           "--cast", "--output-dir", out_dir, "-q")
    assert code == 0, err
    (npy,) = out_dir.glob("*.npy")
    np.testing.assert_array_equal(np.load(npy), np.maximum(x, 0) + 1)


def test_npz_key_pick_forms(capsys, tmp_path, two_input_artifact):
    x = np.arange(10, dtype="float32").reshape(2, 5) - 5
    np.savez(tmp_path / "both.npz", x=x, other=np.ones((2, 5), "float32"))
    np.savez(tmp_path / "only.npz", anything=np.full((2, 5), 3, "float32"))
    out_dir = tmp_path / "out"
    code, _, err = run_cli(capsys, "run", two_input_artifact,
                           "--input", f"x={tmp_path / 'both.npz'}",      # key 'x' by name
                           "--input", f"y={tmp_path / 'only.npz'}",      # the only array
                           "--output-dir", out_dir, "-q")
    assert code == 0, err
    (npy,) = out_dir.glob("*.npy")
    np.testing.assert_array_equal(np.load(npy), np.maximum(x, 0) + 3)
    code, _, err = run_cli(capsys, "run", two_input_artifact,
                           "--input", f"x={tmp_path / 'both.npz'}:other",  # explicit key
                           "--input", f"y={tmp_path / 'both.npz'}:x",
                           "--output-dir", out_dir, "-q")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(npy), 1 + x)


@pytest.mark.parametrize("make, inputs, match", [
    (lambda d: np.savez(d / "a.npz", p=np.ones((2, 5), "f4"), q=np.ones((2, 5), "f4")),
     ["x={d}/a.npz", "y={d}/a.npz:p"], r"has no array 'x'.*Its arrays: p, q"),
    (lambda d: np.savez(d / "a.npz", x=np.ones((2, 5), "f4"), z=np.ones((2, 5), "f4")),
     ["{d}/a.npz"], r"'z' is not an input of the model.*Its inputs: x, y"),
    (lambda d: np.savez(d / "a.npz", x=np.ones((2, 5), "f4"), y=np.ones((2, 5), "f4")),
     ["{d}/a.npz", "x={d}/a.npz"], r"input 'x' is given twice"),
    (lambda d: np.savez(d / "a.npz", x=np.array([{"a": 1}], dtype=object),
                        y=np.ones((2, 5), "f4")),
     ["{d}/a.npz"], r"cannot read .* as an \.npz archive"),
    (lambda d: np.save(d / "a.npz", np.ones((2, 5), "f4")),  # np.save adds .npy
     ["{d}/a.npz.npy"], r"expected NAME=FILE\.npy or FILE\.npz"),
    (lambda d: None, ["{d}/missing.npz"], r"not found"),
])
def test_npz_errors_are_one_line(capsys, tmp_path, two_input_artifact, make, inputs, match):
    make(tmp_path)
    argv = ["run", two_input_artifact]
    for item in inputs:
        argv += ["--input", item.format(d=tmp_path)]
    code, _, err = run_cli(capsys, *argv, "-q")
    assert code == cli.EXIT_ERROR
    assert re.search(match, error_line(err)), err


# -- bench -----------------------------------------------------------------------------------------

def test_bench_percentiles_and_throughput(capsys, two_input_artifact):
    code, out, err = run_cli(capsys, "bench", two_input_artifact, "--repeat", "30",
                             "--warmup", "2", "-q")
    assert code == 0, err
    assert re.search(r"p50 [\d.]+ ms, p90 [\d.]+ ms, p99 [\d.]+ ms", out), out
    assert re.search(r"[\d.]+ runs/s over 30 runs$", out.strip()), out
    code, out, _ = run_cli(capsys, "bench", two_input_artifact, "--repeat", "30", "--warmup",
                           "0", "--json", "-q")
    r = json.loads(out)["nnvm"]
    assert r["min_ms"] <= r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert r["p50_ms"] == r["median_ms"] and r["repeat"] == 30 and r["threads"] is None
    # runs/s of sequential runs is the reciprocal of the mean latency
    assert r["throughput_per_s"] == pytest.approx(1e3 / r["mean_ms"], rel=1e-6)


def test_bench_threads_on_reference_caps_numpy(capsys, two_input_artifact):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    code, out, err = run_cli(capsys, "bench", two_input_artifact, "--repeat", "5",
                             "--threads", "1", "-q")
    assert code == 0, err
    assert out.strip().endswith("runs/s over 5 runs, threads 1"), out
    assert "warning" not in err
    before = [p["num_threads"] for p in threadpoolctl.threadpool_info()]
    run_cli(capsys, "bench", two_input_artifact, "--repeat", "2", "--threads", "1", "-q")
    assert [p["num_threads"] for p in threadpoolctl.threadpool_info()] == before  # restored


def test_bench_threads_must_be_positive(capsys, two_input_artifact):
    code, _, err = run_cli(capsys, "bench", two_input_artifact, "--threads", "0", "-q")
    assert code == cli.EXIT_ERROR and "--threads: must be >= 1" in error_line(err)


@pytest.mark.llvm
def test_bench_threads_sizes_the_llvm_pool(capsys, tmp_path):
    if llvm_reason():
        pytest.skip(llvm_reason())
    lib = nnvm.compiler.build(sym.relu(sym.Variable("x")), target="llvm", shape={"x": (64,)})
    path = tmp_path / "relu_llvm.nnvm"
    lib.export(str(path))
    code, out, err = run_cli(capsys, "bench", path, "--repeat", "5", "--threads", "1",
                             "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["nnvm"]["threads"] == 1


# -- targets ------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, match", [
    ("refrence", "unknown target 'refrence'. Did you mean 'reference'?"),
    ("llvmm", "unknown target 'llvmm'. Did you mean 'llvm'?"),
])
def test_unknown_target_did_you_mean(capsys, tmp_path, mlp_params, target, match):
    code, _, err = run_cli(capsys, "compile", DATA / "nnvm_mlp.json", "--params", mlp_params,
                           "--target", target, "-o", tmp_path / "m.nnvm")
    assert code == cli.EXIT_ERROR and match in error_line(err)


@pytest.mark.parametrize("kind, package", [("opencl", "nnvm-backend-opencl"),
                                           ("cuda", "nnvm-backend-cuda"),
                                           ("llvm", "nnvm-backend-llvm")])
def test_missing_target_names_its_package(tmp_path, kind, package):
    """With plugin autoload off only core's reference target exists, as in a bare install."""
    env = {**os.environ, "NNVM_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "nnvm", "compile", str(DATA / "nnvm_mlp.json"),
                           "--shape", "x=1,8", "--target", kind, "-o", str(tmp_path / "m.nnvm")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == cli.EXIT_ERROR
    line = error_line(proc.stderr)
    assert f"unknown target '{kind}': its plugin is not installed" in line
    assert f"pip install {package}" in line


@pytest.mark.llvm
@pytest.mark.parametrize("target, match", [
    ("llvm -mcpu=foo", "LLVM does not know the CPU 'foo'"),
    ("llvm -mcpu=skylak", "Did you mean 'skylake'"),
    ("llvm -mtriple=nonsense-arch", "LLVM does not know the target triple 'nonsense-arch'"),
    ("llvm -mattr=+avx9", "LLVM does not know the feature(s) avx9"),
    ("llvm -mattr=avx2", "-mattr entries must look like +feature"),
    ("llvm -opt-level=7", "-opt-level out of range"),
    ("llvm -mcpuu=skylake", "unknown option '-mcpuu'. Did you mean '-mcpu'?"),
])
def test_bad_llvm_options_rejected_before_compiling(capsys, tmp_path, mlp_params, target,
                                                    match):
    if llvm_reason():
        pytest.skip(llvm_reason())
    if "skylak" in target and os.uname().machine not in ("x86_64", "AMD64"):
        pytest.skip("an x86 CPU name: the closest names depend on the host's triple")
    out = tmp_path / "m.nnvm"
    code, _, err = run_cli(capsys, "compile", DATA / "nnvm_mlp.json", "--params", mlp_params,
                           "--target", target, "-o", out)
    assert code == cli.EXIT_ERROR
    assert match in error_line(err)
    assert "InferShape" not in err  # refused before the first pass ran
    assert not out.exists()


@pytest.mark.llvm
def test_valid_llvm_cpu_is_accepted_and_recorded(capsys, tmp_path, mlp_params):
    if llvm_reason():
        pytest.skip(llvm_reason())
    out = tmp_path / "m.nnvm"
    code, stdout, err = run_cli(capsys, "compile", DATA / "nnvm_mlp.json", "--params",
                                mlp_params, "--target", "llvm -mcpu=x86-64" if
                                os.uname().machine in ("x86_64", "AMD64") else
                                "llvm -mcpu=generic", "--opt-level", "0", "-o", out, "-q")
    assert code == 0, err
    assert "target llvm -mcpu=" in stdout


# -- output paths -----------------------------------------------------------------------------

def test_compile_to_a_missing_directory_names_it(capsys, tmp_path, mlp_params):
    out = tmp_path / "missing" / "dir" / "x.nnvm"
    code, _, err = run_cli(capsys, "compile", DATA / "nnvm_mlp.json", "--params", mlp_params,
                           "--target", "reference", "-o", out)
    assert code == cli.EXIT_ERROR
    line = error_line(err)
    assert f"-o {out}: directory {out.parent} does not exist" in line and "mkdir -p" in line
    assert "InferShape" not in err  # before compiling


def test_compile_to_a_directory_is_refused(capsys, tmp_path, mlp_params):
    code, _, err = run_cli(capsys, "compile", DATA / "nnvm_mlp.json", "--params", mlp_params,
                           "--target", "reference", "-o", tmp_path)
    assert code == cli.EXIT_ERROR and "is a directory" in error_line(err)


# -- exit codes are documented ---------------------------------------------------------------

def test_exit_codes_documented_in_help_and_docs(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    help_text = capsys.readouterr().out
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", doc, flags=re.M))
    assert {int(c) for c in table} == {code for code, _ in cli.EXIT_CODES}
    for code, meaning in cli.EXIT_CODES:
        assert re.search(rf"^  {code}\s+{re.escape(meaning)}$", help_text, flags=re.M), code
        assert table[str(code)] == meaning
    assert (cli.EXIT_OK, cli.EXIT_INTERNAL, cli.EXIT_ERROR) == (0, 1, 2)
