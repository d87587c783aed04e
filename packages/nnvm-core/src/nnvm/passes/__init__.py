"""Generic passes that live in core: InferShape, InferType and PrintGraphIR (one per file)."""
