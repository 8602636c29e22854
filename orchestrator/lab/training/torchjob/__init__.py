"""The lab's PyTorch training job: DDP over gloo, one rank per lab host, under torchrun.

- :mod:`.launch` starts one ``torchrun`` agent per host (a real process each, which
  starts that host's rank) and is the supervisor-side handle. It imports no torch.
- :mod:`.worker` is the rank (``torchrun ... -m orchestrator.lab.training.torchjob.worker``):
  a small MLP trained deterministically, checkpointed with
  ``torch.distributed.checkpoint`` and committed through :mod:`..sharded`.
- :mod:`.model` holds the model, the seeded data set and the data cursor.

Only :mod:`.worker` and :mod:`.model` import torch; nothing here imports them, so
the lab and the CLI never load torch unless a torch job actually runs.
"""
