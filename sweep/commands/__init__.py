"""The ``sweep`` subcommands (:mod:`sweep.cli` parses the arguments and dispatches)."""
