"""CLI command groups; each module exposes a Typer ``app`` that ``orchestrator.cli`` mounts."""
