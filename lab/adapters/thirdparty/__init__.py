"""Built-in adapters of third-party memory systems, each an optional extra (see lab.adapters.registry)."""
