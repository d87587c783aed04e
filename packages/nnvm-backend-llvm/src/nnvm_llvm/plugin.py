"""Entry point of the NNVM LLVM backend (group ``nnvm``, name ``llvm``).

Imports neither ``tvm`` nor ``tvm_ffi``: availability is reported as a reason string. The
runtime needs apache-tvm-ffi only; building needs apache-tvm (the ``[compiler]`` extra).
"""

from nnvm import hookimpl

from .backend import LLVMBackend, compiler_reason, runtime_reason


@hookimpl
def nnvm_targets() -> list:
    return [LLVMBackend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    build = compiler_reason()
    summary = "LLVM backend (target 'llvm'): " + (
        "build and run" if build is None else
        f"run exported models only; cannot build ({build})" if runtime_reason() is None else
        "unavailable")
    return {"summary": summary}


@hookimpl
def nnvm_add_cli_commands(subparsers) -> None:
    """``nnvm cache info|clear`` (the llvm kernel cache), ``nnvm export-c`` (a model as a
    standalone C library) and ``nnvm tune`` (search the kernels' schedule knobs); none imports
    TVM until it runs."""
    import argparse

    p = subparsers.add_parser(
        "cache", help="show or empty the llvm kernel cache",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The llvm backend keeps linked kernel libraries in NNVM_CACHE_DIR "
                    "(default ~/.cache/nnvm/llvm), verified by sha256 before use and capped "
                    "at NNVM_CACHE_MAX_BYTES (default 2 GiB, least recently used evicted).",
        epilog="examples:\n  nnvm cache info\n  nnvm cache info --json\n  nnvm cache clear")
    p.add_argument("action", choices=["info", "clear"], help="info: where and how big; "
                   "clear: delete every entry")
    p.add_argument("--json", action="store_true", help="print info as JSON")
    p.set_defaults(func=_cmd_cache)

    from .export_c import add_cli_commands  # nnvm export-c (imports no TVM either)
    from .tuning.cli import add_cli_commands as add_tune_command  # nnvm tune (TVM on use)

    add_cli_commands(subparsers)
    add_tune_command(subparsers)


def _cmd_cache(args) -> int:
    import json

    from .compiler import cache

    if args.action == "clear":
        n = cache.clear()
        print(f"llvm kernel cache: removed {n} files from {cache.configured_dir()}")
        return 0
    i = cache.info()
    if args.json:
        print(json.dumps(i, sort_keys=True))
    elif not i["enabled"]:
        print("llvm kernel cache: disabled (NNVM_CACHE_DIR=off)")
    else:
        print(f"llvm kernel cache: {i['dir']}\n"
              f"  entries: {i['entries']} ({i['bytes'] / 2**20:.1f} MiB of "
              f"{i['max_bytes'] / 2**20:.0f} MiB, NNVM_CACHE_MAX_BYTES)\n"
              f"  other files: {i['other_files']} ({i['other_bytes'] / 2**20:.1f} MiB: "
              f"threadpool objects, older cache formats)")
    return 0
