"""nnvm-codegen-c needs nnvm-core and nothing else: with plugin autoload off (core alone, as
in an install without backends or passes) it lowers a graph to plain C kernels."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import nnvm
    from nnvm import sym
    from nnvm_codegen_c import CLikeRenderer, lower_graph

    x = sym.Variable("x")
    y = sym.relu(sym.dense(x, units=8, name="fc") * 2.0)
    g, _ = nnvm.compiler.optimize(y, shape={"x": (4, 16)}, opt_level=0)
    steps = lower_graph(g, CLikeRenderer())
    assert [s.kind for s in steps] == ["kernel"] * 3, steps
    src = CLikeRenderer().render_program([k for s in steps for k in s.kernels])
    assert src.startswith("void k"), src[:80]
    print(" ".join(sorted({m.split(".")[0] for m in sys.modules if m.startswith("nnvm")})))
""")


def test_lowers_with_core_alone():
    env = {**os.environ, "NNVM_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("NNVM_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["nnvm", "nnvm_codegen_c"]
