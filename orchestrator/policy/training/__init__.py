"""Training-job recovery: placement, quarantine, crash loops, checkpoints, ETTR."""
