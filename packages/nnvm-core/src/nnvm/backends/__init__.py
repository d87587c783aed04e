"""Backends that ship with core: only ``reference``, the NumPy interpreter."""
