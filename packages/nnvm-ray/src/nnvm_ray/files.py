"""The files ``nnvm batch`` reads and writes: a folder of ``.npz`` or one Parquet file.

Inputs are read and checked on the driver, one file at a time, so a bad file is reported by
its name before any work is scheduled and (with ``--on-error skip``) the others still run.
Reading on the driver also means a remote cluster needs no shared filesystem: rows travel
to the actors through Ray's object store.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field

import numpy as np
from nnvm import NNVMError
from nnvm.errors import format_error

from .runner import Signature, as_rows

PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass
class InputFile:
    """One input file: its checked arrays (name -> rows) or why it was refused."""

    path: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None

    @property
    def stem(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]

    @property
    def rows(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0


def input_kind(path: str) -> str:
    """``"npz"`` for a folder, ``"parquet"`` for a Parquet file; anything else is refused."""
    if os.path.isdir(path):
        return "npz"
    if os.path.isfile(path) and path.lower().endswith(PARQUET_SUFFIXES):
        return "parquet"
    raise NNVMError(format_error(
        f"--input '{path}'", "is neither a folder of .npz files nor a Parquet file"
        if os.path.exists(path) else "does not exist", "a folder or a .parquet file", path,
        fix="Pass a folder holding one .npz per sample group (keys = input names) or a "
            ".parquet file with one column per input"))


def read_inputs(path: str, signature: Signature) -> list[InputFile]:
    """Every input file under ``path``, each checked against ``signature``."""
    if input_kind(path) == "parquet":
        return [_checked(path, signature, _read_parquet)]
    names = sorted(n for n in os.listdir(path) if n.lower().endswith(".npz"))
    if not names:
        raise NNVMError(format_error(f"--input '{path}'", "holds no .npz files",
                                     fix="Write one .npz per input group, keys = input "
                                         f"names ({', '.join(signature.input_names)})"))
    return [_checked(os.path.join(path, n), signature, _read_npz) for n in names]


def _checked(path: str, signature: Signature, read) -> InputFile:
    where = f"input '{path}'"
    try:
        return InputFile(path, signature.check_rows(read(path, signature), where))
    except NNVMError as exc:
        return InputFile(path, error=str(exc))
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        return InputFile(path, error=f"{where}: cannot be read ({type(exc).__name__}: {exc})")


def _read_npz(path: str, signature: Signature) -> dict[str, np.ndarray]:
    if not zipfile.is_zipfile(path):
        raise NNVMError(format_error(f"input '{path}'", "is not an .npz file (not a zip "
                                     "archive)", fix="Write it with numpy.savez"))
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k in signature.input_names}


def _read_parquet(path: str, signature: Signature) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rows = {p.name: p.row_shape for p in signature.inputs}
    return {n: column_rows(table.column(n), n, rows[n]) for n in table.column_names if n in rows}


def column_rows(column, name: str, row_shape: tuple[int, ...]) -> np.ndarray:
    """An Arrow column as ``(rows, *row_shape)``: plain values, (nested, fixed size) lists,
    Arrow's ``fixed_shape_tensor`` or Ray's tensor extension type."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(arr, pa.FixedShapeTensorArray):
        return arr.to_numpy_ndarray()
    if isinstance(arr, pa.ExtensionArray) and hasattr(arr, "to_numpy"):  # Ray's tensors
        return as_rows(arr.to_numpy(), row_shape)
    values, level = arr, 0
    while pa.types.is_list(values.type) or pa.types.is_large_list(values.type) or \
            pa.types.is_fixed_size_list(values.type):
        lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
        if values.null_count or level >= len(row_shape) or (lengths != row_shape[level]).any():
            raise NNVMError(format_error(
                f"column '{name}'", f"lists at depth {level + 1} do not match the row shape",
                row_shape, sorted(set(lengths.tolist()))[:5],
                fix="Every row must hold one value of the compiled row shape (no nulls)"))
        values, level = values.flatten(), level + 1
    flat = values.to_numpy(zero_copy_only=False)
    return flat.reshape((len(arr), *row_shape[:level]))


def write_npz(out_dir: str, stem: str, outputs: dict[str, np.ndarray]) -> str:
    """``out_dir/stem.npz`` keyed by the model's output names."""
    path = os.path.join(out_dir, stem + ".npz")
    np.savez(path, **outputs)
    return path


def write_parquet(path: str, outputs: dict[str, np.ndarray]) -> str:
    """One column per output; rows of rank >= 1 as Arrow's canonical ``fixed_shape_tensor``
    (read back with ``column.combine_chunks().to_numpy_ndarray()``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {n: (pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(a))
                if a.ndim > 1 else pa.array(a)) for n, a in outputs.items()}
    pq.write_table(pa.table(cols), path)
    return path
