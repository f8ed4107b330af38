"""The demo agent: a real interactive program with fault switches, so Loom runs without a model."""
