"""Helpers shared by the CLI tests: run ``nnvm`` in-process and read its one error line."""

from __future__ import annotations

from nnvm import cli


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def error_line(err: str, only_progress_before: bool = True) -> str:
    """The one error line; with ``only_progress_before`` every other stderr line must be a
    progress line (``[  0.42s] ...``)."""
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("nnvm: error:"), err
    if only_progress_before:
        assert all(line.startswith("[") for line in lines[:-1]), err
    assert "Traceback" not in err
    return lines[-1]
