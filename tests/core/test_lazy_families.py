"""Op families load lazily (issue 15): a family module is imported when one of its ops is
first looked up, through core's ``LazyOpFamily`` records and the generated ``nnvm/ops/_index.py``.

Every case that looks at ``sys.modules`` or the registries runs in a fresh interpreter
(``run_python``), with plugin autoload off where only core's behaviour is under test.
"""

from __future__ import annotations

import json
import pathlib
import textwrap

from test_plugins import run_python

from nnvm.ops import FAMILIES, _index, _make_index

CORE_ONLY = {"NNVM_DISABLE_PLUGIN_AUTOLOAD": "1"}

#: prints the family modules a process imported, as JSON (the last line of a case's output)
PRINT_FAMILIES = """
import json as _json, sys as _sys
print(_json.dumps(sorted(m.rsplit(".", 1)[1] for m in _sys.modules
                         if m.startswith("nnvm.ops.") and not m.startswith("nnvm.ops._")
                         and m != "nnvm.ops.common")))
"""


def run_case(code: str, env: dict | None = None):
    """``code`` in a fresh interpreter that then prints the family modules it imported."""
    return run_python(textwrap.dedent(code) + PRINT_FAMILIES, env)


def families_of(proc) -> set[str]:
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def test_index_is_current():
    """The checked-in index equals the one derived by importing every family."""
    current = pathlib.Path(_index.__file__).read_text()
    assert current == _make_index.render(), (
        "nnvm/ops/_index.py is stale (an op, alias or attribute key of a family changed): "
        "run `python -m nnvm.ops._make_index` and commit the result")


def test_loading_a_reference_artifact_imports_only_the_families_it_uses(tmp_path):
    build = run_python(f"""
        import numpy as np, nnvm
        from nnvm import sym
        x = sym.Variable("x")
        y = sym.dense(sym.flatten(sym.relu(sym.conv2d(
            x, channels=4, kernel_size=(3, 3), padding=(1, 1), name="c"))), units=5, name="d")
        rng = np.random.default_rng(0)
        params = {{"c_weight": rng.standard_normal((4, 3, 3, 3)).astype("float32"),
                  "c_bias": rng.standard_normal(4).astype("float32"),
                  "d_weight": rng.standard_normal((5, 256)).astype("float32"),
                  "d_bias": rng.standard_normal(5).astype("float32")}}
        lib = nnvm.compiler.build(y, "reference", shape={{"x": (1, 3, 8, 8)}}, params=params)
        x_in = rng.standard_normal((1, 3, 8, 8)).astype("float32")
        np.save({str(tmp_path / "x.npy")!r}, x_in)
        np.save({str(tmp_path / "y.npy")!r}, lib.run(x=x_in)[0])
        lib.export({str(tmp_path / "net.nnvm")!r})
    """)
    assert build.returncode == 0, build.stderr
    load = run_case(f"""
        import numpy as np, nnvm.runtime
        module = nnvm.runtime.load({str(tmp_path / "net.nnvm")!r})
        out = module.run(x=np.load({str(tmp_path / "x.npy")!r}))[0]
        np.testing.assert_allclose(out, np.load({str(tmp_path / "y.npy")!r}), rtol=1e-5,
                                   atol=1e-5)
    """)
    loaded = families_of(load)
    # conv2d and dense are nn's, relu elemwise's, flatten transform's
    assert {"nn", "elemwise", "transform"} <= loaded
    assert not loaded & {"sequence", "ml", "text", "vision", "quantize", "control_flow",
                         "onnx_extra", "dynamic_shape"}, loaded


def test_a_lookup_imports_only_the_family_of_the_op():
    proc = run_case("""
        import nnvm
        from nnvm.op import get_op
        assert get_op("string_concat").provider == "nnvm"
    """, CORE_ONLY)
    assert families_of(proc) == {"text"}


def test_an_alias_resolves_through_the_index():
    proc = run_case("""
        from nnvm.op import get_op
        print(get_op("layout_transform").name, get_op("assign").name)
    """, CORE_ONLY)
    assert proc.stdout.split()[:2] == ["__layout_transform__", "_assign"]
    # layout imports nn for conv2d's parameters; nn's ops stay unregistered until asked for
    assert families_of(proc) - {"nn"} == {"layout", "system"}


def test_listing_ops_loads_every_family_and_credits_them_to_core():
    proc = run_case("""
        import json, nnvm
        from nnvm.op import get_op, list_op_names
        names = list_op_names()
        print(json.dumps({"names": names, "providers": sorted({get_op(n).provider for n in names}),
                          "credited": next(p for p in nnvm.plugins()
                                           if p.name == "nnvm").provides["ops"]}))
    """, CORE_ONLY)
    assert families_of(proc) == set(FAMILIES)
    got = json.loads(proc.stdout.splitlines()[-2])
    indexed = {op for ops, _ in _index.INDEX.values() for op in ops}
    assert set(got["names"]) == indexed
    assert got["providers"] == ["nnvm"]
    assert set(got["credited"]) == indexed


def test_nnvm_plugins_credits_every_family_to_core_without_importing_one():
    proc = run_case("""
        from nnvm.cli import main
        main(["plugins", "--json"])
    """, CORE_ONLY)
    assert families_of(proc) == set()
    listing = json.loads("\n".join(proc.stdout.splitlines()[:-1]))
    core = next(p for p in listing if p["name"] == "nnvm")
    assert set(core["provides"]["ops"]) == {op for ops, _ in _index.INDEX.values() for op in ops}


NOTES_PLUGIN = """
    import sys
    from nnvm import hookimpl, plugin_manager
    from nnvm.op import OpAttrDef, attr_provider, get_op

    class Notes:
        def __init__(self, *records):
            self.records = list(records)

        @hookimpl
        def nnvm_ops(self):
            return self.records

    def register(name, *records):
        plugin_manager.register_plugin(Notes(*records), name)
        return next(p for p in plugin_manager.plugins() if p.name == name)

    def text_loaded():
        return "nnvm.ops.text" in sys.modules
"""


def test_an_attr_on_an_op_of_an_unloaded_family_applies_when_it_loads():
    proc = run_python(NOTES_PLUGIN + """
    info = register("notes", OpAttrDef("string_split", "FNote", "from notes"),
                    OpAttrDef("string_concat", "FReference", "faster", plevel=20),
                    OpAttrDef("string_concat", "FInferType", "ignored", plevel=5))
    print(info.broken, text_loaded())
    op = get_op("string_split")
    print(op.get_attr("FNote"), attr_provider("string_split", "FNote"),
          get_op("string_concat").get_attr("FReference"),
          attr_provider("string_concat", "FReference"),
          attr_provider("string_concat", "FInferType"), text_loaded())
    """, CORE_ONLY)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first.split() == ["False", "False"]  # registered without importing the family
    assert second.split() == ["from", "notes", "notes", "faster", "notes", "nnvm", "True"]


def test_an_attr_on_an_unloaded_family_keeps_the_conflict_rules():
    """Same plevel as the family's own attribute, or as another plugin's waiting attribute:
    the later plugin is reported broken, as for a loaded op, and nothing of it applies."""
    proc = run_python(NOTES_PLUGIN + """
    clash = register("clash", OpAttrDef("string_split", "FReference", "mine"))
    first = register("first", OpAttrDef("string_split", "FNote", "first", plevel=30))
    second = register("second", OpAttrDef("string_split", "FNote", "second", plevel=30),
                      OpAttrDef("string_concat", "FNote2", "second"))
    print(clash.broken, first.broken, second.broken, text_loaded())
    print(second.reason)
    op = get_op("string_split")
    print(attr_provider("string_split", "FReference"), op.get_attr("FNote"),
          get_op("string_concat").get_attr("FNote2"))
    """, CORE_ONLY)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["True", "False", "True", "False"]
    assert "already set at plevel 30 by first" in lines[1]
    assert lines[2].split() == ["nnvm", "first", "None"]


def test_a_plugin_name_clashing_with_an_unloaded_op_is_refused():
    proc = run_python(NOTES_PLUGIN + """
    from nnvm.op import define_op
    info = register("copycat", define_op("string_split", doc="mine"))
    print(info.broken, text_loaded())
    print(info.reason)
    """, CORE_ONLY)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["True", "False"]
    assert "the name 'string_split' is taken" in lines[1] and "nnvm" in lines[1]


PLUGIN_FAMILY = """
    from nnvm.op import OpSet
    from nnvm.ops.common import same_dtype, same_shape

    defs = OpSet("mine")
    defs.op("mine_listed", doc="x", shape=same_shape, dtype=same_dtype,
            reference=lambda attrs, x: x, aliases=("mine_alias",))
    defs.op("mine_unlisted", doc="x", shape=same_shape, dtype=same_dtype,
            reference=lambda attrs, x: x + 1)
"""


def test_a_plugin_family_loads_lazily_and_a_stale_record_degrades_gracefully(tmp_path):
    """A third-party LazyOpFamily: its module loads on first use, credited to the plugin;
    an op the (stale) record does not list is still found, after every family loaded."""
    (tmp_path / "mine_ops.py").write_text(textwrap.dedent(PLUGIN_FAMILY))
    proc = run_python(NOTES_PLUGIN + """
    from nnvm.op import LazyOpFamily, get_op
    info = register("mine", LazyOpFamily("mine_ops:defs", {"mine_listed": ("FReference",)},
                                         {"mine_alias": "mine_listed"}))
    print(info.provides["ops"], "mine_ops" in sys.modules)
    print(get_op("mine_alias").name, get_op("mine_listed").provider, "mine_ops" in sys.modules)
    print(get_op("mine_unlisted").provider)
    """, CORE_ONLY, path=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["['mine_listed'] False", "mine_listed mine True", "mine"]


def test_a_record_listing_an_op_its_module_lacks_names_the_fix(tmp_path):
    (tmp_path / "mine_ops.py").write_text(textwrap.dedent(PLUGIN_FAMILY))
    proc = run_python(NOTES_PLUGIN + """
    from nnvm import NNVMError
    from nnvm.op import LazyOpFamily, get_op
    register("mine", LazyOpFamily("mine_ops:defs", {"mine_gone": ()}))
    try:
        get_op("mine_gone")
    except NNVMError as exc:
        print(exc)
    """, CORE_ONLY, path=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "mine_ops:defs" in proc.stdout and "does not define mine_gone" in proc.stdout
    assert "regenerate it" in proc.stdout


def test_concurrent_first_lookups_see_complete_ops():
    """Threads racing to the first lookup of one family: each sees the op with its rules."""
    proc = run_python("""
        import threading
        from nnvm.op import get_op
        names = ["string_concat", "string_split", "regex_full_match", "string_normalizer"] * 8
        seen, barrier = [], threading.Barrier(len(names))

        def look(name):
            barrier.wait()
            seen.append(get_op(name).get_attr("FInferShape") is not None)

        threads = [threading.Thread(target=look, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(len(seen), all(seen))
    """, CORE_ONLY)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["32", "True"]


def test_import_nnvm_imports_no_family():
    assert families_of(run_case("import nnvm", CORE_ONLY)) == set()
