"""``nnvm tune MODEL --target llvm [--trials N] [--log F] [--budget S] [--threads T]``.

The parser is added by the llvm plugin's ``nnvm_add_cli_commands`` hook; nothing here imports
TVM until the command runs.
"""

from __future__ import annotations

import argparse

EPILOG = """examples:
  nnvm tune model.onnx --shape x=1,3,224,224 --trials 16 --budget 600
  nnvm tune model.onnx --log tune.jsonl --threads 2
  NNVM_TUNE_LOG=tune.jsonl nnvm compile model.onnx -o model.nnvm   # applies the log

Without --log the records go to ~/.cache/nnvm/tune/llvm.jsonl, which every llvm build reads.
A rerun continues where the log stops (kernels with --trials records are skipped)."""


def add_cli_commands(subparsers) -> None:
    """Register ``nnvm tune``."""
    p = subparsers.add_parser(
        "tune", help="measure llvm schedule settings on this machine and log the fastest",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Search each kernel's schedule knobs (register tiles, K slices, vector "
                    "widths, unrolling, parallel or not) by compiling and timing candidates "
                    "here; every candidate is checked against the untuned kernel's output.")
    p.add_argument("model", help="an .onnx file or an NNVM graph .json")
    p.add_argument("--target", default="llvm", help="llvm target string (default: llvm)")
    p.add_argument("--trials", type=int, default=16, help="settings per kernel (default 16)")
    p.add_argument("--log", default=None, help="JSONL log to append to (default "
                   "~/.cache/nnvm/tune/llvm.jsonl)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds (resumable)")
    p.add_argument("--threads", type=int, default=None, help="kernel threads while timing")
    p.add_argument("--shape", action="append", metavar="NAME=D1,D2,...",
                   help="input shape (repeatable)")
    p.add_argument("--dtype", default="float32", help="input dtype (default float32)")
    p.add_argument("--params", default=None, help="param dict file for a graph .json")
    p.add_argument("--opt-level", type=int, default=2, help="graph optimisation level")
    p.set_defaults(func=_cmd_tune)


def _cmd_tune(args) -> int:
    from nnvm.cli import parse_shapes

    from .tuner import tune

    result = tune(args.model, args.target, trials=args.trials, log=args.log,
                  budget=args.budget, threads=args.threads, shape=parse_shapes(args.shape),
                  dtype=args.dtype, opt_level=args.opt_level, params_path=args.params)
    print(f"{'kernel':<40} {'kind':<9} {'new':>4} {'old':>4} {'heuristic us':>13} "
          f"{'best us':>9} {'speedup':>8}")
    for k in result.kernels:
        if k.skipped:
            continue
        h = f"{k.heuristic_seconds * 1e6:13.1f}" if k.heuristic_seconds else f"{'-':>13}"
        b = f"{k.best_seconds * 1e6:9.1f}" if k.best_seconds else f"{'-':>9}"
        s = f"{k.speedup:7.2f}x" if k.speedup else f"{'-':>8}"
        print(f"{k.kernel[:40]:<40} {k.kind:<9} {k.measured:>4} {k.resumed:>4} {h} {b} {s}")
    skipped = sum(1 for k in result.kernels if k.skipped)
    print(f"{result.measured} settings measured in {result.seconds:.0f} s at {result.threads} "
          f"threads; {skipped} kernels without knobs; log: {result.log}"
          + (" (budget reached: rerun to continue)" if result.out_of_budget else ""))
    return 0
