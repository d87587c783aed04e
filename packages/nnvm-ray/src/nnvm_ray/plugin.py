"""Entry point of nnvm-ray (group ``nnvm``, name ``ray``): the ``nnvm batch`` subcommand.

Imports neither Ray nor pyarrow: whether Ray Data is usable is reported as a reason string
by ``nnvm plugins``, and Ray is imported only when ``nnvm batch`` runs.
"""

from nnvm import hookimpl

from .cluster import ray_reason


@hookimpl
def nnvm_plugin_info() -> dict:
    reason = ray_reason()
    return {"available": reason,
            "summary": "Ray batch inference: nnvm batch, nnvm_ray.map_batches"
                       + ("" if reason is None else f" (unavailable: {reason})")}


@hookimpl
def nnvm_add_cli_commands(subparsers) -> None:
    """``nnvm batch`` (see ``nnvm_ray.batch_cli``)."""
    from .batch_cli import add_parser

    add_parser(subparsers)
