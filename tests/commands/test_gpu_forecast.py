"""``orchestrator runbook run --dry-run`` shows the GPU plan of a runbook's ``training_move``
tasks, read from a real lab over HTTP, and changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from orchestrator.contracts.training import JobState, StartJobRequest
from tests.fixtures.lab import LabFactory
from tests.workflows.training_support import JOB, job_view, training_config

RUNBOOK = """
name: building-move
kind: drain
parameters:
  building: {type: string}
tasks:
  - id: move-jobs
    template: training_move
    args: {building: "${params.building}"}
"""


async def orchestrator(lab_url: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "ORCHESTRATOR_FLEET_URL": lab_url, "COLUMNS": "200"}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("orchestrator")),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class TestDryRunGpuPlan:
    """The job on use-a moves to free hosts of its region outside use-a (spares first); the
    text form says every job keeps its size; the job is left running where it was."""

    async def test_dry_run(self, start_lab: LabFactory, tmp_path: Path) -> None:
        lab = await start_lab(training_config(total_steps=1_000_000), mode="model")
        fleet = lab.fleet()
        hosts = ["use-a-h00", "use-a-h01"]
        await fleet.start_training_job(StartJobRequest(job=JOB, hosts=hosts), idempotency_key="s")
        path = tmp_path / "move.yaml"
        path.write_text(RUNBOOK)

        code, out, err = await orchestrator(
            lab.url, "runbook", "run", str(path), "-p", "building=use-a", "--dry-run", "--json"
        )
        assert code == 0, err
        [gpu] = json.loads(out)["gpu"]
        [job] = gpu["plan"]["jobs"]
        assert (gpu["task"], job["job"], job["outcome"]) == ("move-jobs", JOB, "moves")
        assert job["leaving"] == hosts and len(job["taking"]) == 2
        assert not any(h.startswith("use-a-") for h in job["taking"])

        code, out, err = await orchestrator(
            lab.url, "runbook", "run", str(path), "-p", "building=use-a", "--dry-run"
        )
        assert code == 0, err
        assert "GPU plan of move-jobs" in out and "every job keeps its size" in out
        assert "dry run, nothing changed" in out
        after = await job_view(fleet)
        assert after.state is JobState.RUNNING and after.hosts == hosts and after.runs == 1
