"""No pickle, marshal, eval or exec in core: a model file must never be able to run code."""

from __future__ import annotations

import pathlib
import re

import nnvm

CORE = pathlib.Path(nnvm.__file__).parent

# pickle/marshal/shelve/dill imports or calls; bare eval(/exec(/compile( (literal_eval is safe);
# np.load without allow_pickle=False; __import__ of a computed name
FORBIDDEN = [
    (re.compile(r"^\s*(import|from)\s+(c?pickle|marshal|shelve|dill|cloudpickle|joblib)\b",
                re.M), "imports a pickle-like module"),
    (re.compile(r"\b(c?pickle|marshal|dill|cloudpickle)\.(loads?|dumps?|Unpickler)\b"),
     "calls pickle"),
    (re.compile(r"(?<![\w.])(eval|exec)\s*\("), "calls eval/exec"),
    (re.compile(r"(?<![\w.])compile\s*\([^)]*['\"](exec|eval|single)['\"]"), "compiles code"),
    (re.compile(r"allow_pickle\s*=\s*True"), "allows pickle in np.load"),
    (re.compile(r"\bnp\.load\((?![^)]*allow_pickle=False)"), "np.load without allow_pickle"),
    (re.compile(r"__import__\s*\("), "imports by computed name"),
]


def _code_lines(text: str) -> str:
    """The source without docstrings/comments, so prose may mention the words."""
    text = re.sub(r'"""[\s\S]*?"""', '""', text)
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def test_core_source_has_no_pickle_marshal_eval():
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 20 and (CORE / "serialization" / "graph_json.py") in files
    problems = []
    for path in files:
        code = _code_lines(path.read_text(encoding="utf-8"))
        for pattern, what in FORBIDDEN:
            for m in pattern.finditer(code):
                line = code[:m.start()].count("\n") + 1
                problems.append(f"{path.relative_to(CORE)}:{line}: {what}: {m.group(0)!r}")
    assert not problems, "\n".join(problems)


def test_the_scanner_finds_what_it_forbids():
    bad = ("import pickle\nx = pickle.loads(b)\ny = eval('1')\nnp.load(p)\n"
           "np.load(p, allow_pickle=True)\n__import__('os')\n")
    code = _code_lines(bad)
    found = {what for pattern, what in FORBIDDEN if pattern.search(code)}
    assert len(found) == 6, found
    ok = _code_lines("ast.literal_eval(s)\nnp.load(p, allow_pickle=False)\n# eval(x)\n")
    assert not any(p.search(ok) for p, _ in FORBIDDEN)
