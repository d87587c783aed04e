"""The ``nnvm`` command line: compile, run, inspect, bench, plugins.

Every subcommand is a small function ``cmd_<name>(args) -> exit code``; plugins add their
own through the ``nnvm_add_cli_commands(subparsers)`` hook. Errors NNVM raises on purpose
(``NNVMError``) print as one line ``nnvm: error: ...`` and exit with 2; ``--debug`` (accepted
before or after the subcommand, so the hint printed with an internal error works as written)
shows the traceback instead. Progress goes to stderr so stdout stays parseable (``--json``).

Exit codes (also in ``nnvm --help`` and docs/cli.md): 0 success; 1 internal error (a bug in
NNVM or a plugin: please report it with the ``--debug`` traceback); 2 the command cannot do
what was asked (bad usage, bad input, missing file or plugin, invalid model or target: the
message says what to change); 130 interrupted (Ctrl-C). Option abbreviations are refused
(``allow_abbrev=False``): ``--shap`` is an error, not ``--shape``, so that a script keeps its
meaning when a later version adds an option sharing the prefix.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

from . import progress
from .errors import NNVMError, format_error
from .log import configure as configure_logging

_log = logging.getLogger("nnvm.cli")

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

#: ``(code, meaning)`` for the help epilog and docs/cli.md (a test keeps the two in step).
EXIT_CODES = (
    (EXIT_OK, "success"),
    (EXIT_INTERNAL, "internal error: a bug in NNVM or a plugin; rerun with --debug and "
                    "report the traceback"),
    (EXIT_ERROR, "the command cannot do what was asked: bad usage or input, missing file "
                 "or plugin, invalid model or target (the one-line message says what to "
                 "change)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
)


class CLIError(NNVMError):
    """A command-line usage error found after parsing (bad ``--shape``, missing input...)."""


# -- small helpers --------------------------------------------------------------------------

class Progress:
    """Stage lines as INFO records of the ``nnvm.cli`` logger, which ``nnvm.log.configure``
    prints on stderr with the elapsed time (``[  0.42s] InferShape: 0.3 ms``); ``-q`` hides
    them, ``-v`` adds DEBUG details. ``quiet=True`` drops them here (a step run for another)."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet

    def __call__(self, message: str) -> None:
        if not self.quiet:
            _log.info("%s", message)


def parse_shapes(items: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,224,224", "s="]`` -> ``{"x": (1, 3, 224, 224), "s": ()}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise CLIError(f"--shape {item!r}: expected NAME=D1,D2,... (e.g. x=1,3,224,224)")
        try:
            shape = tuple(int(d) for d in re.split(r"[,x ]+", dims.strip("()[] ")) if d)
        except ValueError:
            raise CLIError(f"--shape {item!r}: dimensions must be integers, e.g. "
                           f"{name}=1,3,224,224") from None
        if any(d < 0 for d in shape):
            raise CLIError(f"--shape {item!r}: dimensions must be non-negative")
        shapes[name] = shape
    return shapes


def parse_freeze(items: Sequence[str] | None) -> dict[str, np.ndarray]:
    """``["sr=16000", "mask=m.npy", "w=1,2,3"]`` -> ``{name: array}``: inputs bound to
    constants at import (a number, a comma list, or a ``.npy`` file); the importer casts
    each to the input's declared dtype."""
    frozen: dict[str, np.ndarray] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise CLIError(f"--freeze {item!r}: expected NAME=VALUE (a number, a comma list "
                           "or a .npy file), e.g. sr=16000")
        if value.endswith(".npy"):
            try:
                frozen[name] = np.load(value, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise CLIError(f"--freeze {item!r}: cannot read {value} ({exc})") from None
            continue
        try:
            numbers = [float(v) for v in value.strip("()[] ").split(",") if v.strip()]
        except ValueError:
            raise CLIError(f"--freeze {item!r}: {value!r} is not a number, a comma list or a "
                           ".npy file") from None
        arr = np.array(numbers if "," in value else numbers[0])
        if np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        frozen[name] = arr
    return frozen


def parse_dtype(items: Sequence[str] | None) -> str | dict[str, str]:
    """``--dtype float16`` for every input, or ``--dtype x=int64`` (repeatable) per input."""
    from .params import DTYPES

    if not items:
        return "float32"
    per: dict[str, str] = {}
    for item in items:
        name, sep, dtype = item.rpartition("=")
        if dtype not in DTYPES:
            raise CLIError(f"--dtype {item!r}: unknown dtype {dtype!r}; valid: "
                           f"{', '.join(DTYPES)}")
        if not sep:
            if len(items) > 1:
                raise CLIError("--dtype: give one dtype for all inputs, or NAME=DTYPE each")
            return dtype
        per[name] = dtype
    return per


def load_inputs(items: Sequence[str] | None) -> dict[str, np.ndarray]:
    """``--input`` values -> arrays, read with ``allow_pickle=False`` (a file never runs code).

    ``NAME=FILE.npy`` binds one array; ``FILE.npz`` (no name) binds every array of the
    archive to the input of the same name; ``NAME=FILE.npz`` takes the array ``NAME`` of the
    archive (or its only array), and ``NAME=FILE.npz:KEY`` the array ``KEY``.
    """
    out: dict[str, np.ndarray] = {}
    for item in items or ():
        name, sep, path = item.partition("=")
        if not sep and item.endswith(".npz"):
            for key, arr in _read_npz(item).items():
                _add_input(out, key, arr, item)
            continue
        if not sep or not name or not path:
            raise CLIError(format_error(f"--input {item!r}", "expected NAME=FILE.npy or "
                                        "FILE.npz", fix="e.g. --input x=x.npy, or --input "
                                        "inputs.npz to bind every array of the archive"))
        npz_key = None
        if ".npz:" in path:
            path, _, npz_key = path.rpartition(":")
        if path.endswith(".npz"):
            arrays = _read_npz(path)
            key = npz_key or (name if name in arrays or len(arrays) != 1 else next(iter(arrays)))
            if key not in arrays:
                raise CLIError(format_error(
                    f"--input {item}", f"{path} has no array '{key}'",
                    fix=f"Its arrays: {', '.join(arrays) or 'none'}; pick one with "
                        f"{name}={path}:KEY, or bind all by name with --input {path}"))
            _add_input(out, name, arrays[key], item)
            continue
        try:
            arr = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise CLIError(f"--input {name}: file {path!r} not found") from None
        except (ValueError, OSError, EOFError) as exc:
            raise CLIError(f"--input {name}: cannot read {path!r} as a .npy array ({exc})"
                           ) from None
        if not isinstance(arr, np.ndarray):  # an .npz under another extension
            arr.close()
            raise CLIError(format_error(f"--input {item}", f"{path} is an .npz archive, "
                                        "not one array", fix=f"Name it *.npz, or pick an "
                                        f"array with {name}=FILE.npz:KEY"))
        _add_input(out, name, arr, item)
    return out


def _add_input(out: dict, name: str, arr: np.ndarray, item: str) -> None:
    if name in out:
        raise CLIError(format_error(f"--input {item}", f"input '{name}' is given twice",
                                    fix="Give each input once"))
    out[name] = arr


def _read_npz(path: str) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive, in archive order (object arrays refused)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if isinstance(archive, np.ndarray):
                raise CLIError(format_error(f"--input {path}", "is a single .npy array, not "
                                            "an .npz archive", fix=f"Use --input NAME={path}"))
            return {k: archive[k] for k in archive.files}
    except FileNotFoundError:
        raise CLIError(f"--input: file {path!r} not found") from None
    except (ValueError, OSError, EOFError) as exc:
        raise CLIError(f"--input: cannot read {path!r} as an .npz archive of arrays ({exc})"
                       ) from None


def random_inputs(module, seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays for every input of ``module`` with its compiled shape and dtype."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in module.input_names:
        shape, dtype = module.input_shapes.get(name), module.input_dtypes.get(name) or "float32"
        if shape is None:
            raise CLIError(f"input '{name}' has no compiled shape; pass --input {name}=FILE.npy")
        out[name] = _random_array(rng, tuple(shape), dtype)
    return out


def _random_array(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def gather_inputs(args, module, random_default: bool = False) -> dict[str, np.ndarray]:
    """``--input`` arrays, plus random ones for the rest with ``--random`` (or by default)."""
    feed = load_inputs(getattr(args, "input", None))
    unknown = [n for n in feed if n not in module.input_names]
    if unknown:
        raise CLIError(format_error(
            "--input", f"{', '.join(repr(n) for n in unknown)} "
            f"{'is not an input' if len(unknown) == 1 else 'are not inputs'} of the model",
            fix=f"Its inputs: {', '.join(module.input_names) or 'none'}"))
    missing = [n for n in module.input_names if n not in feed]
    if missing and (getattr(args, "random", False) or random_default):
        rand = random_inputs(module, getattr(args, "seed", 0))
        feed.update({n: rand[n] for n in missing})
    elif missing:
        raise CLIError(f"input(s) {', '.join(missing)} not given; pass "
                       + " ".join(f"--input {n}=FILE.npy" for n in missing)
                       + " or --random")
    return feed


def safe_file_name(name: str) -> str:
    """An output name as a file name (ONNX names may hold '/', ':' and the like)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip(".") or "output"
    return cleaned


def _format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


# -- compile --------------------------------------------------------------------------------

def load_model(path: str, shapes: dict, dtype: Any, params_path: str | None, log: Callable,
               **frontend_options: Any):
    """``(graph, params)`` from an ``.onnx`` file (frontend plugin) or NNVM graph ``.json``;
    ``frontend_options`` (e.g. ``freeze``) go to the frontend's ``load``."""
    from .frontend import for_path
    from .serialization.graph_json import load_json
    from .serialization.param_dict import load_param_dict

    if not os.path.exists(path):
        raise CLIError(f"model file {path!r} not found")
    params: dict = {}
    if path.endswith(".json"):
        log(f"reading graph JSON {path}")
        with open(path, "rb") as f:
            graph = load_json(f.read())
    else:
        front = for_path(path)
        if front is None:
            from . import plugin_manager as plugins

            exts = sorted(e for f in plugins.frontends().values() for e in f.extensions)
            hint = "pip install nnvm-frontend-onnx" if path.endswith(".onnx") else \
                f"use a graph .json or a model type with an installed frontend ({exts})"
            raise CLIError(f"{path}: no installed frontend reads this file type; {hint}")
        reason = front.is_available()
        if reason is not None:
            raise CLIError(f"{path}: frontend '{front.name}' is unavailable: {reason}")
        with progress.step(f"importing {path} with frontend '{front.name}'") \
                if not getattr(log, "quiet", False) else contextlib.nullcontext():
            graph, params = front.load(path, shape=shapes or None,
                                       dtype=None if dtype == "float32" else dtype,
                                       **frontend_options)
        params = dict(params or {})
    if params_path:
        log(f"reading params {params_path}")
        try:
            with open(params_path, "rb") as f:
                params.update(load_param_dict(f.read()))
        except FileNotFoundError:
            raise CLIError(f"--params file {params_path!r} not found") from None
    return graph, params


def check_output_path(path: str) -> None:
    """Refuse an artifact path whose directory is missing or read-only, naming the path
    (the writer's temporary file would otherwise be what the OS error names)."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        example = os.path.join(path, "model.nnvm")
        raise CLIError(format_error(f"-o {path}", "is a directory",
                                    fix=f"Give a file name, e.g. -o {example}"))
    if not os.path.isdir(parent):
        raise CLIError(format_error(f"-o {path}", f"directory {parent} does not exist",
                                    fix=f"Create it first (mkdir -p {parent}) or choose "
                                        "another path"))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CLIError(format_error(f"-o {path}", f"directory {parent} is not writable",
                                    fix="Choose a writable directory"))


def cmd_compile(args) -> int:
    from .compiler import build

    log = Progress()
    shapes = parse_shapes(args.shape)
    dtype = parse_dtype(args.dtype)
    out = args.output or os.path.splitext(os.path.basename(args.model))[0] + ".nnvm"
    if os.path.exists(args.model):  # (a missing model is reported first, by load_model)
        check_output_path(out)  # before importing: a typo in -o should not cost the build
    sign_key = None
    if args.sign:  # read the key before compiling: a wrong path should not cost the build
        from .runtime.signing import load_private_key

        sign_key = load_private_key(args.sign)
    freeze = parse_freeze(args.freeze)
    if freeze and not args.model.endswith(".onnx"):
        raise CLIError(f"--freeze: only for models read by a frontend (.onnx); {args.model} "
                       "is a graph .json (bind values with --params instead)")
    graph, params = load_model(args.model, shapes, dtype, args.params, log,
                               **({"freeze": freeze} if freeze else {}))
    shapes = {k: v for k, v in shapes.items() if k not in freeze}
    shapes = {**(graph.attrs.get("shape_inputs") or {}), **shapes}  # a graph .json's own
    log(f"compiling for target {args.target or '(best available)'} at opt level "
        f"{args.opt_level}")
    module = build(graph, target=args.target, shape=shapes, dtype=dtype, params=params,
                   opt_level=args.opt_level, log=log)
    log(f"exporting {out}")
    try:
        module.export(out, sign_key=sign_key)
    except OSError as exc:
        raise CLIError(format_error(f"-o {out}", f"cannot write the artifact "
                                    f"({exc.strerror or exc})",
                                    fix="Choose a writable path")) from None
    stats = module.stats()
    log("done")
    print(f"wrote {out} (target {module.target}, {stats['num_nodes']} ops, "
          f"{stats['num_kernels']} kernels, {os.path.getsize(out)} bytes)")
    return 0


# -- run --------------------------------------------------------------------------------------

def cmd_run(args) -> int:
    from .runtime import load

    log = Progress()
    log(f"loading {args.artifact}")
    module = load(args.artifact)
    module.allow_cast = args.cast
    feed = gather_inputs(args, module)
    log(f"running ({module.target})")
    t0 = time.perf_counter()
    outputs = module.run(**feed)
    elapsed = time.perf_counter() - t0
    if args.output_dir:
        try:
            os.makedirs(args.output_dir, exist_ok=True)
        except OSError as exc:
            raise CLIError(format_error(f"--output-dir {args.output_dir}", "cannot create it "
                                        f"({exc.strerror or exc})",
                                        fix="Choose a writable directory")) from None
    report = []
    for name, arr in zip(module.output_names, outputs):
        arr = np.asarray(arr)
        entry = {"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name}
        if args.output_dir:
            path = os.path.join(args.output_dir, safe_file_name(name) + ".npy")
            np.save(path, arr, allow_pickle=False)
            entry["file"] = path
        report.append(entry)
    if args.json:
        _print_json({"outputs": report, "time_ms": elapsed * 1e3})
        return 0
    for e in report:
        where = f" -> {e['file']}" if "file" in e else ""
        print(f"{e['name']}: shape {tuple(e['shape'])} {e['dtype']}{where}")
    print(f"ran in {elapsed * 1e3:.3f} ms")
    return 0


# -- inspect ----------------------------------------------------------------------------------

def _op_histogram(graph) -> dict[str, int]:
    hist: dict[str, int] = {}
    for n in graph.index.nodes:
        if n.op is not None:
            hist[n.op.name] = hist.get(n.op.name, 0) + 1
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def _io_records(graph, params) -> tuple[list, list]:
    from .runtime.module import output_names_of

    idx = graph.index
    shapes = graph.attrs.get("shape") or [None] * idx.num_node_entries
    dtypes = graph.attrs.get("dtype") or [None] * idx.num_node_entries
    rptr = idx.entry_rptr

    def rec(name, e):
        s = shapes[e]
        return {"name": name, "shape": None if s is None else list(s), "dtype": dtypes[e]}

    inputs = [rec(idx.nodes[i].name, rptr[i]) for i in idx.input_nodes
              if idx.nodes[i].name not in params]
    outputs = [rec(n, e) for n, e in zip(output_names_of(graph),
                                          idx.output_entries)]
    return inputs, outputs


def _artifact_module(artifact):
    """The backend's module when the target is usable here, else a plain Module (stats only)."""
    from .backend import get_backend, parse_target
    from .runtime.module import Module

    try:
        backend = get_backend(parse_target(artifact.target).kind)
        return backend.load(artifact), None
    except NNVMError as exc:
        return Module(artifact.graph(), artifact.params, artifact.target), str(exc)


def cmd_inspect(args) -> int:
    from .runtime.artifact import read_artifact

    path = args.model
    info: dict[str, Any] = {"path": path}
    if path.endswith(".nnvm"):
        artifact = read_artifact(path)
        artifact.check_consistency()
        graph, params = artifact.graph(), artifact.params
        module, why = _artifact_module(artifact)
        info.update(kind="artifact", target=artifact.target,
                    nnvm_version=artifact.manifest.get("nnvm_version"),
                    plugins=artifact.manifest.get("plugins"),
                    members={n: len(b) for n, b in artifact.members.items()},
                    stats=module.stats())
        if why:
            info["backend_unavailable"] = why
        from .runtime.host_tail import attach_host_tail, host_tail_summary

        tail = host_tail_summary(artifact)  # graph.json is the compiled part only
        if tail is not None:
            info["host_tail"] = tail
            if not why:
                info["stats"] = attach_host_tail(module, artifact).stats()
    else:
        shapes = parse_shapes(args.shape)
        graph, params = load_model(path, shapes, parse_dtype(args.dtype), args.params,
                                   Progress(quiet=True))
        info["kind"] = "onnx" if not path.endswith(".json") else "graph-json"
        seeds = {**{k: np.shape(v) for k, v in params.items()}, **shapes}
        types = {k: np.asarray(v).dtype.name for k, v in params.items()}
        graph = graph.apply(["InferShape", "InferType"],
                            shape_inputs={**graph.attrs.get("shape_inputs", {}), **seeds},
                            dtype_inputs={**graph.attrs.get("dtype_inputs", {}), **types})
        from .runtime.memory import activation_bytes

        _, naive = activation_bytes(graph)
        info["stats"] = {"num_nodes": sum(1 for n in graph.index.nodes if n.op is not None),
                         "activation_bytes_naive": naive,
                         "param_bytes": int(sum(np.asarray(v).nbytes
                                                for v in params.values()))}
    info["inputs"], info["outputs"] = _io_records(graph, params)
    if "host_tail" in info:  # the model's outputs, not the compiled part's
        info["outputs"] = info["host_tail"]["outputs"]
    info["params"] = {k: {"shape": list(np.shape(v)), "dtype": np.asarray(v).dtype.name}
                      for k, v in params.items()}
    info["ops"] = _op_histogram(graph)
    if args.dot or args.svg:
        _write_pictures(graph, params, path, args.dot, args.svg)
    if args.onnx:
        _export_onnx_through_plugin(args)
    info["ir"] = graph.ir(join_entry_attrs=[k for k in ("shape", "dtype")
                                            if graph.attrs.get(k) is not None])
    if args.json:
        _print_json(info)
        return 0
    _print_inspect(info)
    return 0


def _export_onnx_through_plugin(args) -> None:
    """``inspect --onnx``: run the ``export-onnx`` command a plugin adds (nnvm-frontend-onnx;
    core cannot import onnx) with this command's model, shapes, dtypes and params."""
    argv = ["export-onnx", args.model, "-o", args.onnx, "-q"]
    for flag in ("shape", "dtype"):
        for item in getattr(args, flag) or ():
            argv += [f"--{flag}", item]
    if args.params:
        argv += ["--params", args.params]
    parser = build_parser()
    if "export-onnx" not in parser.commands:
        raise CLIError(format_error("inspect --onnx", "no installed plugin exports ONNX",
                                    fix="pip install nnvm-frontend-onnx adds it"))
    sub = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # stdout stays inspect's own (--json)
        sub.func(sub)


def _fused_for_picture(graph):
    """An imported model's graph with FuseOps' groups when the passes package is installed,
    so the picture shows the kernels a default build would make; the graph unchanged
    otherwise (an artifact's graph already carries them)."""
    if graph.attrs.get("group_root") is not None:
        return graph
    from .pass_manager import list_passes

    if "FuseOps" not in list_passes():
        return graph
    try:
        return graph.apply(["FuseOps"], opt_level=graph.attrs.get("opt_level", 2))
    except NNVMError:  # a graph FuseOps cannot group is still worth drawing
        return graph


def _write_pictures(graph, params, path: str, dot_path: str | None,
                    svg_path: str | None) -> None:
    import shutil
    import subprocess

    from .graph_dot import to_dot

    text = to_dot(_fused_for_picture(graph), params, title=os.path.basename(path))
    if dot_path:
        _write_text(dot_path, text, "--dot")
    if svg_path:
        exe = shutil.which("dot")
        if exe is None:
            raise CLIError(format_error(
                "nnvm inspect --svg", "Graphviz's 'dot' program is not on PATH",
                fix="Install Graphviz (apt install graphviz, brew install graphviz) or write "
                    "DOT text with --dot OUT.dot and render it elsewhere"))
        proc = subprocess.run([exe, "-Tsvg", "-o", svg_path], input=text.encode(),
                              capture_output=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise CLIError(format_error(
                "nnvm inspect --svg", "Graphviz failed to render the graph",
                got=proc.stderr.decode(errors="replace").strip()[-500:],
                fix="Write the DOT text with --dot and report the failure"))


def _write_text(dest: str, text: str, flag: str) -> None:
    try:
        with open(dest, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise CLIError(format_error(f"nnvm inspect {flag}", f"cannot write {dest!r}",
                                    got=exc.strerror or str(exc),
                                    fix="Give a path in an existing, writable folder")) from None


def _print_inspect(info: dict) -> None:
    print(f"{info['path']}: {info['kind']}" + (f", target {info['target']}"
                                               if "target" in info else ""))
    if info.get("backend_unavailable"):
        print(f"  (backend not usable here: {info['backend_unavailable']})")
    for key in ("inputs", "outputs"):
        print(f"{key}:")
        for r in info[key]:
            shape = "?" if r["shape"] is None else tuple(r["shape"])
            print(f"  {r['name']}: {shape} {r['dtype'] or '?'}")
    tail = info.get("host_tail")
    if tail:
        print(f"host tail: {tail['host_nodes']} node(s) from '{tail['first_node']}' "
              f"({tail['first_op']}) onwards run on the host after the compiled part; ops: "
              + ", ".join(f"{op} x{n}" for op, n in tail["ops"].items()))
    print(f"params: {len(info['params'])}")
    print("ops:")
    for name, count in info["ops"].items():
        print(f"  {count:5d}  {name}")
    print("stats:")
    for k, v in info["stats"].items():
        shown = _format_bytes(v) if "_bytes" in k and isinstance(v, int) else v
        print(f"  {k}: {shown}")
    print("ir:")
    print(info["ir"])


# -- plugins ----------------------------------------------------------------------------------

def cmd_plugins(args) -> int:
    from .plugin_manager import plugins

    infos = plugins()
    if args.json:
        _print_json([{"name": p.name, "version": p.version, "module": p.module,
                      "available": p.available, "reason": p.reason, "summary": p.summary,
                      "provides": p.provides} for p in infos])
        return 0
    for p in infos:
        state = "available" if p.available else f"unavailable: {p.reason}"
        print(f"{p.name} {p.version} ({state})")
        if p.summary:
            print(f"  {p.summary}")
        for kind, names in p.provides.items():
            if names:
                shown = ", ".join(names[:12]) + (f", ... ({len(names)} total)"
                                                 if len(names) > 12 else "")
                print(f"  {kind}: {shown}")
    return 0


# -- bench ------------------------------------------------------------------------------------

def time_calls(fn: Callable[[], Any], repeat: int, warmup: int) -> list[float]:
    """Seconds per call of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _summary(times: list[float]) -> dict[str, float]:
    """Latency percentiles (ms) and throughput of sequential runs.

    ``throughput_per_s`` is runs completed per second of timed wall time (one run at a time,
    so it is ``1 / mean``; the tail percentiles are what a latency budget is set against).
    """
    a = np.asarray(times) * 1e3
    p50, p90, p99 = (float(v) for v in np.percentile(a, [50, 90, 99]))
    return {"median_ms": float(np.median(a)), "p50_ms": p50, "p90_ms": p90, "p99_ms": p99,
            "min_ms": float(a.min()), "mean_ms": float(a.mean()), "max_ms": float(a.max()),
            "throughput_per_s": len(times) / (float(a.sum()) / 1e3) if a.sum() > 0 else
            float("inf"), "repeat": len(times)}


def _format_summary(label: str, r: dict) -> str:
    threads = f", threads {r['threads']}" if r.get("threads") else ""
    return (f"{label}: p50 {r['p50_ms']:.3f} ms, p90 {r['p90_ms']:.3f} ms, "
            f"p99 {r['p99_ms']:.3f} ms, min {r['min_ms']:.3f} ms, "
            f"{r['throughput_per_s']:.1f} runs/s over {r['repeat']} runs{threads}")


def _apply_threads(module, n: int | None) -> tuple[int | None, bool]:
    """Apply ``--threads n``: ``(threads in effect or None, whether to cap NumPy's BLAS)``.

    A module with ``set_num_threads`` (llvm: its kernel pool) is resized, and reports the
    size it got. The reference target computes with NumPy, whose BLAS threads threadpoolctl
    can cap. Elsewhere (a GPU queue) there is nothing to set, and a warning says so rather
    than printing a thread count that was not applied.
    """
    if not n:
        return None, False
    setter = getattr(module, "set_num_threads", None)
    if callable(setter):
        got = setter(n)
        return (got if isinstance(got, int) and got > 0 else n), False
    kind = str(module.target).split()[0] if module.target else ""
    if kind == "reference":
        try:
            import threadpoolctl  # noqa: F401
        except ImportError:
            print("nnvm: warning: --threads needs threadpoolctl to cap NumPy's threads on "
                  "'reference' (pip install threadpoolctl); running unchanged", file=sys.stderr)
            return None, False
        return n, True
    print(f"nnvm: warning: --threads: target '{module.target}' has no thread setting; "
          "ignored", file=sys.stderr)
    return None, False


@contextlib.contextmanager
def _blas_thread_limit(n: int | None):
    """Cap the threads NumPy's BLAS may use (the reference target's dense/conv)."""
    if not n:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=n):
        yield


def cmd_bench(args) -> int:
    from .runtime import load

    if args.repeat < 1 or args.warmup < 0:
        raise CLIError("--repeat must be >= 1 and --warmup >= 0")
    if args.threads is not None and args.threads < 1:
        raise CLIError(format_error("--threads", "must be >= 1", got=args.threads,
                                    fix="Leave it out to use every core"))
    log = Progress()
    log(f"loading {args.artifact}")
    module = load(args.artifact)
    module.allow_cast = args.cast
    threads, cap_blas = _apply_threads(module, args.threads)
    feed = gather_inputs(args, module, random_default=True)  # timing needs no real data
    for k, v in feed.items():
        module.set_input(k, v)
    log(f"timing nnvm ({module.target}): {args.warmup} warmup, {args.repeat} runs")
    with _blas_thread_limit(threads if cap_blas else None):
        result: dict[str, Any] = {"nnvm": _summary(time_calls(module.run, args.repeat,
                                                              args.warmup))}
    result["nnvm"]["target"] = module.target
    result["nnvm"]["threads"] = threads
    if args.compare:
        if args.compare != "onnxruntime":
            raise CLIError(f"--compare {args.compare!r}: only 'onnxruntime' is supported")
        if not args.onnx:
            raise CLIError("--compare onnxruntime needs --onnx MODEL.onnx (the same model)")
        result["onnxruntime"], diff = _bench_onnxruntime(args, module, feed, log)
        result["ratio"] = result["nnvm"]["median_ms"] / result["onnxruntime"]["median_ms"]
        result["max_abs_diff"] = diff
    steps = None
    if args.profile or args.trace:
        from .runtime import profiler

        log("profiling every step")
        steps = profiler.profile_module(module, repeat=args.repeat, warmup=args.warmup)
        peak, how = profiler.cpu_peak_gflops(threads)
        result["profile"] = {"peak_gflops": peak, "peak": how,
                             "steps": [{"name": st.name, "ms": st.seconds * 1e3,
                                        "gflop": st.flops / 1e9, "ops": st.ops}
                                       for st in steps]}
        if args.trace:
            try:
                profiler.write_trace(steps, args.trace)
            except OSError as exc:
                raise CLIError(format_error(f"--trace {args.trace}", "cannot write the trace "
                                            f"({exc.strerror or exc})",
                                            fix="Choose a writable path")) from None
            log(f"wrote {args.trace} (open it in ui.perfetto.dev or chrome://tracing)")
    if args.json:
        _print_json(result)
        return 0
    print(_format_summary(f"nnvm ({result['nnvm']['target']})", result["nnvm"]))
    if args.profile:
        print(profiler.format_table(steps, result["profile"]["peak_gflops"],
                                    result["profile"]["peak"]))
    if args.compare:
        o = result["onnxruntime"]
        print(_format_summary(f"onnxruntime {o['version']}", o))
        print(f"ratio nnvm/onnxruntime: {result['ratio']:.2f}x (p50; max abs output "
              f"difference {result['max_abs_diff']:.3g})")
    return 0


def _bench_onnxruntime(args, module, feed: dict, log) -> tuple[dict, float]:
    try:
        import onnxruntime as ort
    except ImportError:
        raise CLIError("--compare onnxruntime: onnxruntime is not installed; "
                       "pip install onnxruntime") from None
    if not os.path.exists(args.onnx):
        raise CLIError(f"--onnx {args.onnx!r} not found")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if args.threads:
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(args.onnx, opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise CLIError(f"--onnx {args.onnx}: onnxruntime cannot load it ({exc})") from None
    names = [i.name for i in sess.get_inputs()]
    missing = [n for n in names if n not in feed]
    if missing:
        raise CLIError(f"--onnx {args.onnx}: inputs {missing} are not inputs of the artifact "
                       f"({sorted(feed)}); compare the same model")
    ort_feed = {n: feed[n] for n in names}
    log(f"timing onnxruntime {ort.__version__}: {args.warmup} warmup, {args.repeat} runs")
    summary = _summary(time_calls(lambda: sess.run(None, ort_feed), args.repeat, args.warmup))
    summary["version"] = ort.__version__
    summary["threads"] = args.threads
    ours = module.run()
    theirs = sess.run(None, ort_feed)
    diff = 0.0
    for a, b in zip(ours, theirs):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape == b.shape and a.size:
            diff = max(diff, float(np.max(np.abs(a - b))))
        elif a.shape != b.shape:
            diff = float("inf")
    return summary, diff


# -- parser -----------------------------------------------------------------------------------

_EPILOG = """examples:
  nnvm compile model.onnx --target llvm --shape x=1,3,224,224 -o model.nnvm
  nnvm run model.nnvm --input x=x.npy --output-dir out/
  nnvm inspect model.nnvm
  nnvm bench model.nnvm --repeat 50 --compare onnxruntime --onnx model.onnx
  nnvm plugins
  python -m nnvm ...                (the same, without the console script)

Errors print as one line; --debug (before or after the subcommand) shows the traceback.
-v adds detail, -q keeps only warnings and errors (both anywhere on the line). Progress
bars appear on a terminal for steps longer than a second (import, lowering, compiling).
Options must be spelled in full (--shape, not --shap).

exit codes:
""" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES)

_HELP = argparse.RawDescriptionHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="nnvm", formatter_class=_HELP, epilog=_EPILOG, allow_abbrev=False,
        description="NNVM: compile deep-learning models to one-file artifacts and run them.")
    parser.add_argument("--version", action="version", version=f"nnvm {__version__}")
    for flags, kw in _GLOBAL_FLAGS:
        parser.add_argument(*flags, **kw)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", help="compile a model to a .nnvm artifact", formatter_class=_HELP,
                       description="Import a model, optimise it and write one .nnvm file.",
                       epilog="examples:\n"
                              "  nnvm compile model.onnx --shape x=1,3,224,224 -o model.nnvm\n"
                              "  nnvm compile net.json --params net.params --shape data=1,8 "
                              "--target reference --opt-level 3 -o net.nnvm\n"
                              "  nnvm compile model.onnx --dtype x=int64 --target llvm")
    p.add_argument("model", help="an .onnx file (needs nnvm-frontend-onnx) or NNVM graph .json")
    p.add_argument("--params", help="param-dict file (NNVM/TVM format) for a graph .json")
    p.add_argument("--target", help="reference, llvm, opencl, cuda, with options "
                                    "('llvm -mcpu=native'); default: best available")
    p.add_argument("--shape", action="append", metavar="NAME=D1,D2,...",
                   help="input shape, repeatable")
    p.add_argument("--dtype", action="append", metavar="[NAME=]DTYPE",
                   help="input dtype for all inputs, or per input (repeatable)")
    p.add_argument("--freeze", action="append", metavar="NAME=VALUE",
                   help="bind an input to a constant at import (a number, a comma list or "
                        "a .npy file), repeatable; e.g. a sample rate: --freeze sr=16000")
    p.add_argument("--opt-level", type=int, default=2, choices=range(4), metavar="{0..3}",
                   help="optimisation level (default 2)")
    p.add_argument("-o", "--output", metavar="OUT.nnvm", help="artifact path")
    p.add_argument("--sign", metavar="KEY", help="sign the artifact with this private key "
                   "(made by nnvm keygen; needs nnvm-core[sign])")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run an artifact on .npy inputs", formatter_class=_HELP,
                       description="Load a .nnvm artifact, run it once, save the outputs.",
                       epilog="examples:\n"
                              "  nnvm run model.nnvm --input x=x.npy --output-dir out/\n"
                              "  nnvm run model.nnvm --random --json")
    p.add_argument("artifact", help="a .nnvm file")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy|FILE.npz",
                   help="an input array, repeatable; FILE.npz binds each of its arrays to "
                        "the input of that name (NAME=FILE.npz[:KEY] picks one)")
    p.add_argument("--random", action="store_true",
                   help="random values for inputs not given with --input")
    p.add_argument("--seed", type=int, default=0, help="seed for --random (default 0)")
    p.add_argument("--output-dir", metavar="DIR", help="write DIR/<output-name>.npy")
    p.add_argument("--cast", action="store_true",
                   help="cast inputs of another dtype (same kind, e.g. float64 -> float32) "
                        "instead of refusing them")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("inspect", help="show IR, op histogram and memory statistics",
                       formatter_class=_HELP,
                       description="Describe a .nnvm artifact, an NNVM graph .json or an "
                                   ".onnx model.",
                       epilog="examples:\n  nnvm inspect model.nnvm\n"
                              "  nnvm inspect model.onnx --shape x=1,3,224,224 --json\n"
                              "  nnvm inspect net.json --params net.params\n"
                              "  nnvm inspect model.nnvm --dot model.dot --svg model.svg\n"
                              "  nnvm inspect model.nnvm --onnx model.optimized.onnx")
    p.add_argument("model", help=".nnvm, graph .json or .onnx")
    p.add_argument("--shape", action="append", metavar="NAME=D1,D2,...",
                   help="input shape for .json/.onnx, repeatable")
    p.add_argument("--dtype", action="append", metavar="[NAME=]DTYPE", help="input dtype")
    p.add_argument("--params", help="param-dict file for a graph .json")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--dot", metavar="OUT.dot",
                   help="also write the graph as Graphviz DOT: fused kernels as clusters, "
                        "shapes and dtypes on the edges")
    p.add_argument("--svg", metavar="OUT.svg",
                   help="also render the graph to SVG (needs Graphviz's 'dot' on PATH)")
    p.add_argument("--onnx", metavar="OUT.onnx",
                   help="also write the optimised graph as ONNX for Netron (the export-onnx "
                        "command of nnvm-frontend-onnx)")
    p.set_defaults(func=cmd_inspect)

    from .cli_sign import add_commands as add_signing_commands

    add_signing_commands(sub, _HELP)

    p = sub.add_parser("plugins", help="list plugins, versions, availability",
                       formatter_class=_HELP,
                       description="Every discovered plugin: version, availability (with the "
                                   "reason when unavailable) and what it provides.",
                       epilog="examples:\n  nnvm plugins\n  nnvm plugins --json")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("bench", help="time an artifact (optionally against onnxruntime)",
                       formatter_class=_HELP,
                       description="Median latency of module.run(); inputs are random unless "
                                   "given with --input.",
                       epilog="examples:\n  nnvm bench model.nnvm --repeat 100 --warmup 10\n"
                              "  nnvm bench model.nnvm --compare onnxruntime --onnx model.onnx")
    p.add_argument("artifact", help="a .nnvm file")
    p.add_argument("--repeat", type=int, default=20, help="timed runs (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy|FILE.npz",
                   help="an input array, repeatable; FILE.npz binds each of its arrays to "
                        "the input of that name (NAME=FILE.npz[:KEY] picks one)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    p.add_argument("--cast", action="store_true",
                   help="cast inputs of another dtype (same kind, e.g. float64 -> float32) "
                        "instead of refusing them")
    p.add_argument("--threads", type=int, metavar="N",
                   help="threads for the kernels (and for onnxruntime with --compare); "
                        "default: every core")
    p.add_argument("--profile", action="store_true",
                   help="per-step table sorted by time: ms, GFLOP, GFLOP/s, %% of this CPU's "
                        "peak (llvm)")
    p.add_argument("--trace", metavar="OUT.json",
                   help="write the steps as a Chrome/Perfetto trace (llvm)")
    p.add_argument("--compare", metavar="RUNTIME", help="also time 'onnxruntime'")
    p.add_argument("--onnx", metavar="MODEL.onnx", help="the ONNX model for --compare")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_bench)

    from .plugin_manager import get_plugin_manager

    get_plugin_manager().hook.nnvm_add_cli_commands(subparsers=sub)
    parser.commands = sub.choices  # type: ignore[attr-defined]  # name -> subparser
    for p in sub.choices.values():  # plugins' subcommands too (argparse reads it at parse)
        p.allow_abbrev = False
        for flags, kw in _GLOBAL_FLAGS:
            if not any(f in p._option_string_actions for f in flags):
                # SUPPRESS: a subcommand must not reset a flag given before it.
                p.add_argument(*flags, **{**kw, "default": argparse.SUPPRESS})
    return parser


#: Flags accepted anywhere on the line (before or after the subcommand).
_GLOBAL_FLAGS = (
    (("--debug",), dict(action="store_true", default=False,
                        help="show full tracebacks on errors")),
    (("-v", "--verbose"), dict(action="count", default=0,
                               help="more detail on stderr (per-pass timings, cache hits)")),
    (("-q", "--quiet"), dict(action="store_true", default=False,
                             help="only warnings and errors on stderr; no progress bars")),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nnvm`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Until parsing succeeds (a plugin hook may fail while the parser is built) the flag
    # is looked for anywhere before a "--"; afterwards the parsed value decides.
    debug = "--debug" in argv[:argv.index("--")] if "--" in argv else "--debug" in argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        debug = bool(getattr(args, "debug", False))
        configure_logging(-1 if args.quiet else min(args.verbose, 1))
        if getattr(args, "func", None) is None:
            parser.print_help()
            return EXIT_ERROR
        return int(args.func(args) or 0)
    except NNVMError as exc:
        if debug:
            raise
        print(f"nnvm: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("nnvm: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence of a CLI
        if debug:
            raise
        print(f"nnvm: internal error: {type(exc).__name__}: {_one_line(exc)} "
              f"(rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
