"""The fuzz campaign: boundaries, their probes and the strategies that feed them."""
