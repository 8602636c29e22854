"""The chaos trials: worker SIGKILLs, a dev-server restart and a flaky fleet API."""
