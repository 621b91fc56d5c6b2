"""Tools below every part: atomic files, locks, lazy imports, redaction, exact
processes, ports, network policy, the bytecode cache. No task moves here."""
