"""The lab's real training job: a deterministic numpy trainer process and its checkpoints.

- :mod:`.trainer` is the process (``python -m orchestrator.lab.training.trainer``):
  SGD with momentum on synthetic data, heartbeats, atomic checksummed checkpoints.
- :mod:`.checkpoints` writes, lists, verifies, loads and corrupts checkpoints.
- :mod:`.process` is the supervisor-side handle: start, stop, kill, pause, resume,
  read the heartbeat.
- :mod:`.status` holds the heartbeat and progress files both sides agree on.

Nothing is imported here on purpose: the trainer pins BLAS threads before numpy
loads, which only works if importing the package does not load numpy first.
"""
