"""loom supervise: the runtime, its loops, the service definitions, metrics and logging."""
