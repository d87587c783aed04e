"""The opencl artifact's plan.json is validated before use (issue 16): a corrupt or edited
plan, with every hash recomputed so that it gets past the sha256 checks, is a
SerializationError naming the member and the field, never a KeyError while binding kernels
or a kernel writing outside its tensor."""

from __future__ import annotations

import json
import os
import random
import sys

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import NNVMError, SerializationError
from nnvm.testing.models import MODELS

from opencl_devices import REASON, TARGETS

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "core"))
from test_fuzz_artifact import _mutate_json, _rehash, _unzip, _zip  # noqa: E402

pytestmark = pytest.mark.skipif(REASON is not None, reason=f"opencl unavailable: {REASON}")


def _mlp():
    x = sym.Variable("x")
    y = sym.softmax(sym.dense(sym.relu(sym.dense(x, units=8, name="fc1")), units=4,
                              name="fc2"))
    rng = np.random.default_rng(0)
    params = {"fc1_weight": rng.standard_normal((8, 6)).astype("float32"),
              "fc1_bias": rng.standard_normal(8).astype("float32"),
              "fc2_weight": rng.standard_normal((4, 8)).astype("float32"),
              "fc2_bias": rng.standard_normal(4).astype("float32")}
    return y, params


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(artifact members, input, expected output) of an MLP exported for opencl."""
    y, params = _mlp()
    x = np.random.default_rng(1).standard_normal((2, 6)).astype("float32")
    want = nnvm.compiler.build(y, target="reference", shape={"x": (2, 6)},
                               params=params).run(x=x)[0]
    lib = nnvm.compiler.build(y, target=TARGETS[0][1], shape={"x": (2, 6)}, params=params)
    path = tmp_path_factory.mktemp("ocl") / "mlp.nnvm"
    lib.export(str(path))
    return _unzip(path.read_bytes()), x, want


def _load(members: dict, tmp_path):
    path = tmp_path / "edited.nnvm"
    path.write_bytes(_zip(_rehash(members)))
    return nnvm.runtime.load(str(path))


def _with_plan(members: dict, edit) -> dict:
    plan = json.loads(members["plan.json"])
    edit(plan)
    return {**members, "plan.json": json.dumps(plan).encode()}


def _first_kernel(plan):
    return next(k for s in plan["steps"] for k in s["kernels"])


def _drop_arg_offset(plan):
    del plan["offsets"][str(_first_kernel(plan)["args"][0]["entry"])]


def _offset_past_arena(plan):
    plan["offsets"][next(iter(plan["offsets"]))] = plan["arena_bytes"]


def _misaligned(plan):
    key = next(iter(plan["offsets"]))
    plan["offsets"][key] += 1


EDITS = {
    "version": (lambda p: p.update(version=2), "version"),
    "arena_bytes": (lambda p: p.update(arena_bytes=-1), "arena_bytes"),
    "steps": (lambda p: p.update(steps="x"), "steps"),
    "kind": (lambda p: p["steps"][0].update(kind="gpu"), "steps[0].kind"),
    "root": (lambda p: p["steps"][0].update(root=10 ** 6), "steps[0].root"),
    "unknown offset entry": (lambda p: p["offsets"].update({"99999": 0}), "offsets['99999']"),
    "offset past the arena": (_offset_past_arena, "offsets["),
    "misaligned offset": (_misaligned, "offsets["),
    "arg without offset": (_drop_arg_offset, ""),
    "kernel name": (lambda p: _first_kernel(p).update(name="nope"), ".name"),
    "arg dtype": (lambda p: _first_kernel(p)["args"][0].update(dtype="float64"),
                  ".args[0].dtype"),
    "global_size": (lambda p: _first_kernel(p).update(global_size=[]), ".global_size"),
    "local_size": (lambda p: _first_kernel(p).update(local_size="x"), ".local_size"),
    "arg entry": (lambda p: _first_kernel(p)["args"][0].update(entry=-1), ".args[0].entry"),
}


def test_exported_plan_passes_and_runs(exported, tmp_path):
    members, x, want = exported
    lib = _load(members, tmp_path)
    np.testing.assert_allclose(lib.run(x=x)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_zoo_plans_pass(name, tmp_path):
    """Real plans (convs, pools, host steps, reshapes aliased in the arena) are accepted."""
    net, params, shapes = MODELS[name]()
    lib = nnvm.compiler.build(net, target=TARGETS[0][1], shape=shapes, params=params)
    path = tmp_path / f"{name}.nnvm"
    lib.export(str(path))
    rng = np.random.default_rng(0)
    feed = {k: rng.standard_normal(v).astype("float32") for k, v in shapes.items()}
    got = nnvm.runtime.load(str(path)).run(**feed)
    want = lib.run(**feed)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_edited_plan_is_refused_naming_the_field(exported, edit, tmp_path):
    fn, field = EDITS[edit]
    with pytest.raises(SerializationError) as info:
        _load(_with_plan(exported[0], fn), tmp_path)
    text = str(info.value)
    assert "member 'plan.json', field '" in text and field in text, text
    if edit == "arg without offset":
        assert "has no arena offset" in text, text


@pytest.mark.parametrize("member,body,what", [
    ("plan.json", b"{not json", "is not valid JSON"),
    ("plan.json", None, "is missing"),
    ("kernels.cl", b"\xff\xfe__kernel", "is not UTF-8"),
    ("kernels.cl", None, "is missing"),
])
def test_broken_members_are_refused(exported, member, body, what, tmp_path):
    members = dict(exported[0])
    if body is None:
        del members[member]
    else:
        members[member] = body
    with pytest.raises(SerializationError, match=f"member '{member}'.*{what}"):
        _load(members, tmp_path)


def test_fuzzed_plans_raise_only_nnvm_errors(exported, tmp_path):
    """plan.json mutated structurally, hashes recomputed: every case reaches the schema."""
    members, x, _want = exported
    r = random.Random("opencl-plan")
    bad, refused = [], 0
    for i in range(int(os.environ.get("NNVM_FUZZ_CASES", "1500")) // 5):
        try:
            body = json.dumps(_mutate_json(json.loads(members["plan.json"]), r)).encode()
        except RecursionError:  # the mutation nested deeper than json can write
            continue
        try:
            _load({**members, "plan.json": body}, tmp_path).run(x=x)
        except NNVMError:
            refused += 1
        except Exception as exc:  # noqa: BLE001 - what this test exists to find
            bad.append(f"case {i}: {type(exc).__name__}: {str(exc)[:160]}")
    assert not bad, "\n".join(bad[:20])
    assert refused > 0
