"""``nnvm tune`` for llvm: records are measured, resumed, applied by ``build`` and shipped.

A tiny model (a conv and a dense) is tuned with 3 settings per kernel into a temporary log;
every check reads that log or builds against it. Nothing here asserts a time: which setting
wins depends on the machine, what must hold is that the winner is the one ``build`` applies,
that it computes what the reference computes, and that a log of another CPU, an unreadable
log, or no log leaves the untuned kernels.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm import sym

pytest.importorskip("tvm")
from nnvm_llvm.compiler import cache  # noqa: E402
from nnvm_llvm.compiler.codegen import kernel_lowerings  # noqa: E402
from nnvm_llvm.compiler.schedules import ScheduleInfo, knob_space, schedule  # noqa: E402
from nnvm_llvm.tuning import cpu_model, read_log, tune  # noqa: E402
from nnvm_llvm.tuning.records import settled  # noqa: E402
from nnvm_llvm.tuning.tuner import _prepare  # noqa: E402

SHAPE = {"x": (1, 8, 12, 12)}
TRIALS = 3


def _model():
    rng = np.random.default_rng(3)
    x = sym.Variable("x")
    y = sym.relu(sym.conv2d(x, channels=16, kernel_size=(3, 3), padding=(1, 1), name="c"))
    y = sym.dense(sym.flatten(y), units=32, name="fc")
    params = {"c_weight": rng.standard_normal((16, 8, 3, 3)).astype("float32"),
              "c_bias": rng.standard_normal(16).astype("float32"),
              "fc_weight": rng.standard_normal((32, 16 * 144)).astype("float32"),
              "fc_bias": rng.standard_normal(32).astype("float32")}
    return y, params


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """(model, params, log path, first TuneResult): one tuning run shared by the tests."""
    d = tmp_path_factory.mktemp("tune")
    mp = pytest.MonkeyPatch()
    mp.setenv("NNVM_CACHE_DIR", str(d / "cache"))
    mp.delenv("NNVM_TUNE_LOG", raising=False)
    cache.clear_memory()
    y, params = _model()
    log = str(d / "tune.jsonl")
    result = tune(y, trials=TRIALS, log=log, shape=SHAPE, params=params, threads=1)
    yield y, params, log, result
    mp.undo()
    cache.clear_memory()


def _build(y, params, **options):
    return nnvm.compiler.build(y, target="llvm", shape=SHAPE, params=params, **options)


def _kernel_names(lib) -> set[str]:
    return {s["func"] for s in lib._plan["steps"] if s["kind"] == "kernel"}


def test_records_written_for_each_tunable_kernel(tuned):
    _, _, log, result = tuned
    recs = read_log(log)
    kinds = {k.kind for k in result.kernels if not k.skipped}
    assert {"conv2d", "dense"} <= kinds
    per_workload: dict[str, int] = {}
    for r in recs:
        assert r["cpu"] == cpu_model() and r["threads"] == 1 and isinstance(r["knobs"], dict)
        assert (r["seconds"] is None) == bool(r["error"])
        per_workload[r["workload"]] = per_workload.get(r["workload"], 0) + 1
    assert sorted(per_workload.values()) == [TRIALS] * len(per_workload)
    assert result.measured == len(recs) == TRIALS * len(per_workload)
    assert all(k.best_seconds for k in result.kernels if not k.skipped)


def test_rerun_resumes_without_measuring(tuned):
    y, params, log, _ = tuned
    before = open(log).read()
    again = tune(y, trials=TRIALS, log=log, shape=SHAPE, params=params, threads=1)
    assert again.measured == 0
    assert {k.resumed for k in again.kernels if not k.skipped} == {TRIALS}
    assert open(log).read() == before


def test_build_applies_best_records_and_matches_reference(tuned, tmp_path):
    y, params, log, _ = tuned
    by_workload: dict[str, list] = {}
    for r in read_log(log):
        if r["seconds"] is not None:
            by_workload.setdefault(r["workload"], []).append(r)
    best = {w: settled(rs) for w, rs in by_workload.items()}
    lib = _build(y, params, tune_log=log, num_threads=1)  # the records' thread count
    info = lib.stats()["tuning"]
    assert info["tuned"] == len(best)
    assert {(r["workload"], json.dumps(r["knobs"], sort_keys=True)) for r in info["records"]} \
        == {(w, json.dumps(r["knobs"], sort_keys=True)) for w, r in best.items()}
    untuned = _build(y, params, tune_log="off")
    assert untuned.stats()["tuning"]["tuned"] == 0
    assert _kernel_names(lib) != _kernel_names(untuned)  # the knobs are in the cache key
    xv = np.random.default_rng(0).standard_normal(SHAPE["x"]).astype("float32")
    ref = nnvm.compiler.build(y, target="reference", shape=SHAPE, params=params)
    np.testing.assert_allclose(lib.run(x=xv)[0], ref.run(x=xv)[0], rtol=1e-4, atol=1e-4)
    path = tmp_path / "m.nnvm"
    lib.export(str(path))
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith("executor.json"))
        shipped = json.loads(zf.read(name))["tuning"]
    assert shipped == info
    loaded = nnvm.runtime.load(str(path))
    assert loaded.stats()["tuning"] == info  # a deployed artifact says how it was tuned
    np.testing.assert_allclose(loaded.run(x=xv)[0], ref.run(x=xv)[0], rtol=1e-4, atol=1e-4)


def test_env_variable_names_the_log(tuned, monkeypatch):
    y, params, log, _ = tuned
    monkeypatch.setenv("NNVM_TUNE_LOG", log)
    assert _build(y, params).stats()["tuning"]["tuned"] >= 2
    with nnvm.compiler.build_config(tune_log="off"):
        assert _build(y, params).stats()["tuning"]["tuned"] == 0


def test_record_of_another_cpu_is_ignored(tuned, tmp_path):
    y, params, log, _ = tuned
    other = tmp_path / "other.jsonl"
    with open(other, "w") as f:
        for r in read_log(log):
            f.write(json.dumps({**r, "cpu": "Some Other CPU | avx2"}) + "\n")
    lib = _build(y, params, tune_log=str(other))
    assert lib.stats()["tuning"]["tuned"] == 0
    assert _kernel_names(lib) == _kernel_names(_build(y, params, tune_log="off"))


def test_broken_log_line_names_file_and_line(tuned, tmp_path):
    y, params, log, _ = tuned
    bad = tmp_path / "bad.jsonl"
    lines = open(log).read().splitlines()
    bad.write_text("\n".join(lines[:2] + ['{"workload": "abc", "knobs": {'] + lines[2:]) + "\n")
    with pytest.raises(nnvm.NNVMError, match=r"bad\.jsonl', line 3: is not JSON"):
        _build(y, params, tune_log=str(bad))
    bad.write_text('{"workload": "abc"}\n')
    with pytest.raises(nnvm.NNVMError, match=r"line 1: lacks the field\(s\) target, cpu, knobs"):
        tune(y, trials=1, log=str(bad), shape=SHAPE, params=params, threads=1)


def test_heuristic_setting_is_the_untuned_kernel():
    """The first choice of every knob is the heuristic's: the same TIR as no knobs."""
    import tvm
    from nnvm_llvm.compiler.target import tvm_target, vector_lanes
    from nnvm.backend import parse_target

    y, params = _model()
    graph, params = _prepare(y, SHAPE, "float32", params, 2)
    lanes = vector_lanes(tvm_target(parse_target("llvm")))
    checked = 0
    for gl in kernel_lowerings(graph, params, lanes):
        space = knob_space(gl.primfunc(lanes), ScheduleInfo(gl.kind, lanes))
        if not space:
            continue
        assert all(len(set(map(repr, v))) == len(v) for v in space.values()), space
        plain = schedule(gl.primfunc(lanes), ScheduleInfo(gl.kind, lanes))
        first = schedule(gl.primfunc(lanes), ScheduleInfo(
            gl.kind, lanes, knobs={k: v[0] for k, v in space.items()}))
        tvm.ir.assert_structural_equal(plain, first)
        checked += 1
    assert checked >= 2


def test_non_llvm_target_and_bad_trials_are_refused():
    y, params = _model()
    with pytest.raises(nnvm.NNVMError, match="is not llvm"):
        tune(y, "reference", trials=2, shape=SHAPE, params=params)
    with pytest.raises(nnvm.NNVMError, match="trials must be at least 1"):
        tune(y, trials=0, shape=SHAPE, params=params)


def test_cli_tunes_a_graph_json_into_its_log(tmp_path, capsys, monkeypatch):
    """``nnvm tune`` as the llvm plugin registers it (``add_cli_commands``)."""
    import argparse

    from nnvm.compiler import save_param_dict
    from nnvm.graph import Graph
    from nnvm.serialization.graph_json import save_json
    from nnvm_llvm.tuning.cli import add_cli_commands

    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path / "cache"))
    y, params = _model()
    (tmp_path / "m.json").write_text(save_json(Graph(y.outputs)))
    (tmp_path / "m.params").write_bytes(save_param_dict(params))
    parser = argparse.ArgumentParser()
    add_cli_commands(parser.add_subparsers(dest="command"))
    log = tmp_path / "cli.jsonl"
    args = parser.parse_args(["tune", str(tmp_path / "m.json"), "--params",
                              str(tmp_path / "m.params"), "--shape", "x=1,8,12,12",
                              "--trials", "2", "--threads", "1", "--log", str(log)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "settings measured" in out and str(log) in out
    assert {r["kind"] for r in read_log(str(log))} >= {"conv2d", "dense"}


def test_parallel_knob_of_another_thread_count_is_dropped(tmp_path):
    """Serial always wins at 1 thread: a 1-thread record tunes a 2-thread build's tiles but
    leaves its parallel choice to the heuristic; at its own thread count it applies whole."""
    from nnvm_llvm.tuning.records import append_record, best_records

    log = str(tmp_path / "t.jsonl")
    base = {"workload": "w", "target": "t", "cpu": "c", "error": None}
    append_record(log, {**base, "knobs": {"mr": 4, "parallel": False}, "seconds": 1.0,
                        "threads": 1, "relative": 0.9})
    append_record(log, {**base, "knobs": {"mr": 8, "parallel": True}, "seconds": 2.0,
                        "threads": 1, "relative": 1.0})
    assert best_records([log], "t", "c", threads=2)["w"]["knobs"] == {"mr": 4}
    assert best_records([log], "t", "c", threads=1)["w"]["knobs"] == {"mr": 4, "parallel": False}
    assert best_records([log], "t", "other cpu", threads=1) == {}


def test_a_gain_inside_the_timing_scatter_keeps_the_heuristic(tmp_path):
    """A setting 1% faster than the heuristic in its round is noise on a shared machine:
    the build applies the heuristic's record (the untuned kernel); one 10% faster wins."""
    from nnvm_llvm.tuning.records import MIN_GAIN, append_record, best_records

    log = str(tmp_path / "t.jsonl")
    base = {"target": "t", "cpu": "c", "error": None, "threads": 1}
    for wl, rel in (("noise", 1 - MIN_GAIN / 3), ("gain", 0.9)):
        append_record(log, {**base, "workload": wl, "knobs": {"mr": 4}, "seconds": 1.0,
                            "relative": rel})
        append_record(log, {**base, "workload": wl, "knobs": {"mr": 8}, "seconds": 1.1,
                            "relative": 1.0})
    best = best_records([log], "t", "c", threads=1)
    assert best["noise"]["knobs"] == {"mr": 8} and best["gain"]["knobs"] == {"mr": 4}


def test_odd_channel_conv_row_tile_matches_reference():
    """A 1-channel conv (a score map) is tiled along the row one vector wide; still exact."""
    rng = np.random.default_rng(5)
    x = sym.Variable("x")
    y = sym.sigmoid(sym.conv2d(x, channels=1, kernel_size=(3, 3), padding=(1, 1), name="c"))
    params = {"c_weight": rng.standard_normal((1, 8, 3, 3)).astype("float32"),
              "c_bias": rng.standard_normal(1).astype("float32")}
    shape = {"x": (1, 8, 10, 37)}
    xv = rng.standard_normal(shape["x"]).astype("float32")
    got = nnvm.compiler.build(y, target="llvm", shape=shape, params=params, tune_log="off")
    ref = nnvm.compiler.build(y, target="reference", shape=shape, params=params)
    np.testing.assert_allclose(got.run(x=xv)[0], ref.run(x=xv)[0], rtol=1e-5, atol=1e-5)


def test_uneven_row_tile_is_refused_where_the_output_is_a_slice():
    """A lane-padded matmul (N = 40 is no whole vector) writes its output through a slice,
    whose predicate replaces the write-back's: an ``mr`` that does not divide M (8 on 60
    rows) would store rows past the output's end (it crashed ``nnvm tune`` on Whisper).
    The space offers no such tile, and the template refuses one given anyway."""
    a, b = sym.Variable("a"), sym.Variable("b")
    shape = {"a": (1, 2, 60, 64), "b": (1, 2, 64, 40)}
    graph, params = _prepare(sym.matmul(a, b), shape, "float32", {}, 2)
    lanes = 16
    gl = next(g for g in kernel_lowerings(graph, params, lanes) if g.kind == "matmul")
    space = knob_space(gl.primfunc(lanes), ScheduleInfo(gl.kind, lanes))
    assert space["mr"] and all(60 % mr == 0 for mr in space["mr"]), space
    uneven = ScheduleInfo(gl.kind, lanes, knobs={"mr": 8})
    schedule(gl.primfunc(lanes), uneven)
    assert not uneven.applied
    lib = nnvm.compiler.build(sym.matmul(a, b), target="llvm", shape=shape, tune_log="off")
    rng = np.random.default_rng(1)
    av, bv = (rng.standard_normal(shape[k]).astype("float32") for k in ("a", "b"))
    np.testing.assert_allclose(lib.run(a=av, b=bv)[0], av @ bv, rtol=1e-4, atol=1e-4)


def test_a_record_the_template_refuses_builds_the_heuristic_kernel(tmp_path, monkeypatch):
    """A log written before a template changed can hold knobs the template now refuses;
    the build then makes the untuned kernel, not the plain loop nest."""
    from nnvm.backend import parse_target
    from nnvm_llvm.compiler import codegen
    from nnvm_llvm.compiler.target import tvm_target
    from nnvm_llvm.tuning.records import append_record, workload_key

    a, b = sym.Variable("a"), sym.Variable("b")
    shape = {"a": (1, 2, 60, 64), "b": (1, 2, 64, 40)}
    graph, params = _prepare(sym.matmul(a, b), shape, "float32", {}, 2)
    gl = next(g for g in kernel_lowerings(graph, params, 16) if g.kind == "matmul")
    log = str(tmp_path / "stale.jsonl")
    append_record(log, {"workload": workload_key(gl.signature), "kernel": gl.pretty,
                        "kind": "matmul", "target": str(tvm_target(parse_target("llvm"))),
                        "cpu": cpu_model(), "knobs": {"mr": 8}, "seconds": 1e-6,
                        "threads": 1, "error": None, "relative": 0.5})
    calls = []

    def spy(func, info):
        out = schedule(func, info)
        calls.append((info.kind, dict(info.knobs), info.applied))
        return out
    monkeypatch.setattr(codegen, "schedule", spy)
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path / "cache"))
    lib = nnvm.compiler.build(sym.matmul(a, b), target="llvm", shape=shape, tune_log=log)
    assert [c for c in calls if c[0] == "matmul"] == [("matmul", {"mr": 8}, False),
                                                      ("matmul", {}, True)]
    rng = np.random.default_rng(2)
    av, bv = (rng.standard_normal(shape[k]).astype("float32") for k in ("a", "b"))
    np.testing.assert_allclose(lib.run(a=av, b=bv)[0], av @ bv, rtol=1e-4, atol=1e-4)
