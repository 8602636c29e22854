"""One worker process that runs every workflow and activity of the project."""

from __future__ import annotations

import asyncio
import signal
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.fleet.protocol import Fleet
from orchestrator.logging import get_logger
from orchestrator.promhealth.configured import fleet_from_settings
from orchestrator.temporal import connect, metrics_runtime

__all__ = ["HEARTBEAT_THROTTLE", "build_worker", "run_worker", "sandbox_runner"]

log = get_logger(__name__)

#: How long in-flight activities get to finish (or heartbeat out) on SIGTERM.
GRACEFUL_SHUTDOWN = timedelta(seconds=20)
#: Send each heartbeat within a second: a cancel (a runbook task's timeout, an abort) rides
#: back on the heartbeat's answer, and a run waits for its activities to stop before it
#: rolls back; the SDK's default would hold each heartbeat back up to 8 s.
HEARTBEAT_THROTTLE = timedelta(seconds=1)

# Models, policies and activity definitions are deterministic and imported by
# workflows; passing them through saves re-importing them for every run.
_PASSTHROUGH = ("orchestrator", "pydantic", "pydantic_core", "annotated_types")


def sandbox_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*_PASSTHROUGH)
    )


def build_worker(client: Client, settings: Settings, fleet: Fleet) -> Worker:
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=registry.workflows(),
        activities=registry.activities(ctx),
        activity_executor=ThreadPoolExecutor(max_workers=8),
        workflow_runner=sandbox_runner(),
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )


async def run_worker(settings: Settings) -> None:
    """Connect, run until SIGTERM or SIGINT, then shut down gracefully."""
    client = await connect(settings, runtime=metrics_runtime(settings.metrics_address))
    fleet = fleet_from_settings(settings)
    worker = build_worker(client, settings, fleet)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "worker started",
        temporal=settings.temporal.address,
        namespace=settings.temporal.namespace,
        task_queue=settings.task_queue,
        fleet=repr(fleet),
        metrics=settings.metrics_address or None,
    )
    run = asyncio.create_task(worker.run())
    stopped = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({run, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if stopped in done:
        log.info("shutting down", grace_s=GRACEFUL_SHUTDOWN.total_seconds())
        await worker.shutdown()
    stopped.cancel()
    await run
    await fleet.aclose()
    log.info("worker stopped")
