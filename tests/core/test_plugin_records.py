"""Hooks return records (issue 15): credit by the hook's plugin, broken plugins isolated,
the deprecated ``nnvm_register_*`` hooks still work and warn.

Every case runs in a fresh interpreter (``run_python``) so this process's registries stay
clean; third-party plugins are real distributions (a ``.dist-info`` with an ``nnvm`` entry
point) on ``PYTHONPATH``, discovered the way pip-installed ones are.
"""

from __future__ import annotations

import textwrap

from test_plugins import _needs_entry_points, run_python


def install_plugin(tmp_path, name: str, source: str) -> str:
    """A distribution ``nnvm-<name>`` whose entry point ``<name>`` is ``source``."""
    dist = tmp_path / f"nnvm_{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nnvm-{name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[nnvm]\n{name} = nnvm_{name}_plugin\n")
    (tmp_path / f"nnvm_{name}_plugin.py").write_text(textwrap.dedent(source))
    return str(tmp_path)


GOOD = """
    import numpy as np
    from nnvm import hookimpl
    from nnvm.op import OpAttrDef, OpPattern, define_op
    from nnvm.ops.common import same_dtype, same_shape
    from nnvm.pass_manager import define_pass

    @hookimpl
    def nnvm_ops():
        return [define_op("good_double", doc="2 * x.", shape=same_shape, dtype=same_dtype,
                          reference=lambda attrs, x: 2 * x, pattern=OpPattern.ELEMWISE),
                OpAttrDef("relu", "FGoodNote", "set by good", plevel=10)]

    @hookimpl
    def nnvm_passes():
        return [define_pass("GoodIdentity", lambda g: g)]
"""


def test_defining_records_registers_nothing():
    proc = run_python("""
        import nnvm.ops.elemwise, nnvm.passes.infer_shape
        from nnvm import op, pass_manager
        print(len(nnvm.ops.elemwise.defs.records) > 10, len(op._OPS), len(pass_manager._PASSES))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "0", "0"]


def test_records_are_credited_to_their_plugin_whatever_the_import_order(tmp_path):
    """Every plugin's modules imported before discovery, core last: credit is unchanged."""
    _needs_entry_points("example", "passes", "tinyflow")
    proc = run_python("""
        import nnvm_good_plugin, nnvm_example.plugin, nnvm_passes.fuse_ops, tinyflow.ops
        import nnvm
        from nnvm import op, pass_manager
        print(op.get_op("good_double").provider, op.attr_provider("relu", "FGoodNote"),
              op.attr_provider("relu", "FReference"), op.get_op("example_swish").provider,
              op.get_op("tf_random_normal").provider, pass_manager.get_pass("FuseOps").provider,
              pass_manager.get_pass("GoodIdentity").provider,
              pass_manager.get_pass("InferShape").provider)
        info = {p.name: p for p in nnvm.plugins()}
        print(info["good"].provides)
    """, path=install_plugin(tmp_path, "good", GOOD))
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first.split() == ["good", "good", "nnvm", "example", "tinyflow", "passes", "good",
                             "nnvm"]
    assert second == ("{'ops': ['good_double'], 'passes': ['GoodIdentity'], 'targets': [], "
                      "'frontends': []}")


BROKEN = {
    "raises": """
        from nnvm import hookimpl

        @hookimpl
        def nnvm_ops():
            raise RuntimeError("kernel table missing")
    """,
    "typo": """
        from nnvm import hookimpl

        @hookimpl
        def nnvm_op():
            return []

        @hookimpl
        def nnvm_plugin_info():
            return {"summary": "never asked: the plugin is not registered"}
    """,
    "wrongtype": """
        from nnvm import hookimpl

        @hookimpl
        def nnvm_passes():
            return ["SimplifyAlgebra"]
    """,
    "badattr": """
        from nnvm import hookimpl
        from nnvm.op import OpAttrDef

        @hookimpl
        def nnvm_ops():
            return [OpAttrDef("relu", "FBadNote", 1), OpAttrDef("no_such_op", "FBadNote", 1)]
    """,
    "clash": """
        from nnvm import hookimpl
        from nnvm.op import define_op
        from nnvm.pass_manager import define_pass

        @hookimpl
        def nnvm_ops():
            return [define_op("clash_only_op", doc="never registered", reference=abs)]

        @hookimpl
        def nnvm_passes():
            return [define_pass("InferShape", lambda g: g)]
    """,
}

EXPECTED_REASON = {
    "raises": "hook nnvm_ops() raised RuntimeError('kernel table missing'). Fix nnvm_ops",
    "typo": "defines hook nnvm_op, which nnvm does not have. Did you mean nnvm_ops?",
    "wrongtype": "returned an item nnvm cannot register; expected PassDef or PipelineDef",
    "badattr": "OpAttrDef('no_such_op', 'FBadNote') from badattr: names no registered op",
    "clash": "pass 'InferShape' from clash: already registered by nnvm",
}


def test_a_broken_plugin_is_listed_with_its_reason_and_the_others_keep_working(tmp_path):
    for name, source in BROKEN.items():
        install_plugin(tmp_path, name, source)
    install_plugin(tmp_path, "good", GOOD)
    proc = run_python("""
        import sys
        import nnvm
        from nnvm.cli import main
        print(nnvm.op.get_op("relu").name, nnvm.op.get_op("good_double").provider)
        main(["plugins"])
        print("relu FBadNote:", nnvm.op.get_op("relu").get_attr("FBadNote"))
        try:
            nnvm.op.get_op("clash_only_op")  # all or none: the clashing plugin added no op
        except nnvm.NNVMError as exc:
            print("clash op:", type(exc).__name__)
    """, path=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.splitlines()[0] == "relu good"
    for name, reason in EXPECTED_REASON.items():
        line = next(ln for ln in out.splitlines() if ln.startswith(f"{name} 1.0 "))
        assert line.startswith(f"{name} 1.0 (unavailable: broken: "), line
        assert reason in line, line
    assert "typo 1.0 (unavailable: broken:" in out and "pip uninstall nnvm-typo" in out
    assert "good 1.0 (available)" in out and "clash op: OpNotFoundError" in out
    assert "relu FBadNote: None" in out


def test_the_deprecated_hooks_still_register_and_warn_naming_the_plugin():
    proc = run_python("""
        import warnings
        import numpy as np
        import nnvm
        from nnvm import hookimpl
        from nnvm.plugin_manager import register_plugin

        class OldStyle:
            @hookimpl
            def nnvm_register_ops(self, registry):
                registry.register_op("old_triple", doc="3 * x", reference=lambda a, x: 3 * x,
                                     shape=lambda a, i, o: (i, i), pattern=registry.OpPattern.ELEMWISE)
                registry.add_alias("old_triple", "old_3x")
                registry.set_op_attr("relu", "FOldNote", 1, plevel=11)

            @hookimpl
            def nnvm_register_passes(self, registry):
                registry.register_pass("OldIdentity", invalidates=registry.DERIVED)(lambda g: g)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            register_plugin(OldStyle(), "oldstyle")
        for w in caught:
            print(w.category.__name__, w.message)
        print(nnvm.op.get_op("old_3x").name, nnvm.op.get_op("old_triple").provider,
              nnvm.op.attr_provider("relu", "FOldNote"),
              nnvm.pass_manager.get_pass("OldIdentity").provider)
    """)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == [
        "DeprecationWarning nnvm plugin 'oldstyle' implements nnvm_register_ops, deprecated "
        "since 0.4: return records from nnvm_ops() instead (docs/plugins.md)",
        "DeprecationWarning nnvm plugin 'oldstyle' implements nnvm_register_passes, deprecated "
        "since 0.4: return records from nnvm_passes() instead (docs/plugins.md)"]
    assert lines[2:] == ["old_triple oldstyle oldstyle oldstyle"]


def test_the_example_plugin_uses_only_the_record_hooks():
    _needs_entry_points("example")
    proc = run_python("""
        import nnvm
        info = {p.name: p for p in nnvm.plugins()}["example"]
        print(info.available, info.provides)
    """, env={"PYTHONWARNINGS": "error::DeprecationWarning"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("True {'ops': ['example_swish'], 'passes': ['FuseSwish'], "
                                   "'targets': ['example'], 'frontends': []}")
