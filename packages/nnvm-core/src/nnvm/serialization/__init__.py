"""Serialisation: NNVM graph JSON and the NNVM/TVM param-dict binary format. No pickle."""
