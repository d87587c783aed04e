"""nnvm-example-plugin: a third-party NNVM plugin (op ``example_swish``, pass ``FuseSwish``,
target ``example``). Everything lives in ``plugin.py``; nnvm finds it through its entry point."""

__version__ = "0.4.0"
