"""The runtime side: what runs a compiled module (IREE runtime seam, CompiledModel, packages). Needs no compiler."""
