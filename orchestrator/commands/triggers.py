"""``orchestrator triggers``: the webhook server that starts runbooks from alerts.

Secrets never need to appear on a command line (where ``ps`` shows them): the
token and HMAC secret are read from ``ORCHESTRATOR_TRIGGERS_TOKEN`` /
``ORCHESTRATOR_TRIGGERS_HMAC_SECRET`` or from the files the ``--*-file`` options name.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.table import Table

from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.exceptions import OrchestratorError

__all__ = ["app"]

app = typer.Typer(
    name="triggers",
    help="Start runbooks from Alertmanager webhooks and API calls.",
    no_args_is_help=True,
    add_completion=False,
)

RUNBOOKS_OPTION = typer.Option(Path("runbooks"), "--runbooks", help="Directory of runbook YAML.")


@app.callback()
def triggers() -> None:
    """Start runbooks from Alertmanager webhooks and API calls."""


@app.command("list")
def list_triggers(runbooks: Path = RUNBOOKS_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Show which alerts start which runbook (after linting every runbook)."""
    from orchestrator.triggers.catalog import load_runbooks
    from orchestrator.triggers.rules import dedup_scope

    try:
        loaded = load_runbooks(runbooks)
    except OrchestratorError as exc:
        fail(str(exc), code=2)
    rows = [
        {
            "runbook": rb.name,
            "alertname": t.alertname,
            "matchers": ", ".join(f'{m.label}{m.op}"{m.value}"' for m in t.matchers),
            "parameters": ", ".join(f"{p}<-{label}" for p, label in t.parameters.items()),
            "cooldown": str(t.cooldown),
            "dedup": dedup_scope(t),
        }
        for rb in loaded
        for t in rb.triggers
    ]
    if as_json:
        print_json(rows)
        return
    columns = ["runbook", "alertname", "matchers", "parameters", "cooldown", "dedup"]
    table = Table(*columns)
    for row in rows:
        table.add_row(*(row[c] for c in columns))
    console.print(table if rows else "no runbook has triggers")


@app.command()
def serve(
    port: int = typer.Option(9095, "--port", help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    runbooks: Path = RUNBOOKS_OPTION,
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="ORCHESTRATOR_TRIGGERS_TOKEN",
        show_default=False,
        help="Bearer token senders must present (prefer the env var or --token-file).",
    ),
    token_file: Path | None = typer.Option(
        None, "--token-file", envvar="ORCHESTRATOR_TRIGGERS_TOKEN_FILE", help="File with the token."
    ),
    hmac_secret: str | None = typer.Option(
        None,
        "--hmac-secret",
        envvar="ORCHESTRATOR_TRIGGERS_HMAC_SECRET",
        show_default=False,
        help="Secret for X-Signature-SHA256 body signatures (prefer the env var or a file).",
    ),
    hmac_secret_file: Path | None = typer.Option(
        None,
        "--hmac-secret-file",
        envvar="ORCHESTRATOR_TRIGGERS_HMAC_SECRET_FILE",
        help="File with the HMAC secret.",
    ),
) -> None:
    """Serve POST /v1/alerts/alertmanager, POST /v1/runbooks/{name}/runs, /healthz and
    /metrics until Ctrl-C."""
    import uvicorn

    from orchestrator.commands.platform import settings_or_exit
    from orchestrator.logging import configure_logging
    from orchestrator.temporal import connect
    from orchestrator.triggers.auth import load_credentials
    from orchestrator.triggers.boundary import uvicorn_config
    from orchestrator.triggers.catalog import load_runbooks
    from orchestrator.triggers.server import create_app
    from orchestrator.triggers.starter import TemporalRunStarter

    settings = settings_or_exit()
    configure_logging(settings.log_level)
    try:
        credentials = load_credentials(token, token_file, hmac_secret, hmac_secret_file)
        loaded = load_runbooks(runbooks)
    except OrchestratorError as exc:
        fail(str(exc), code=2)

    async def run() -> None:
        client = await connect(settings)
        starter = TemporalRunStarter(client, settings.task_queue)
        app_ = create_app(loaded, starter, credentials)
        config = uvicorn_config(app_, host=host, port=port)
        console.print(
            f"trigger server on http://{host}:{port} with {len(loaded)} runbook(s), "
            f"starting runs on task queue {settings.task_queue!r}"
        )
        await uvicorn.Server(config).serve()

    try:
        asyncio.run(run())
    except OrchestratorError as exc:
        fail(str(exc), code=2)
    except KeyboardInterrupt:
        pass
