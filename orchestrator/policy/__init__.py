"""Pure algorithms: no I/O, no Temporal. Unit-tested and benchmarked on their own."""
