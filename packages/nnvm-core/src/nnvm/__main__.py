"""``python -m nnvm``: the ``nnvm`` command where the console script is not on PATH (a venv
not activated, several Pythons side by side), with the same arguments and exit codes."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
