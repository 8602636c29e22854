"""Commands that start a run refuse, before anything starts, a region, service or training
job the fleet does not have: one line, a non-zero exit, no workflow (each command its own
process, against a real dev server and the model lab)."""

from __future__ import annotations

import pytest
from temporalio.service import RPCError

from tests.workflows.conftest import Stack
from tests.workflows.runbook.test_drain import cli


class TestRefusedBeforeStarting:
    """Each command that takes a region, service or job, given one the lab lacks."""

    @pytest.mark.parametrize(
        ("args", "workflow_id"),
        [
            (["undrain", "xx-nowhere", "--wait"], "undrain-xx-nowhere"),
            (["drain", "xx-nowhere", "--wait"], "drain-xx-nowhere"),
            (["loadtest", "xx-nowhere", "--id", "lt-unknown"], "lt-unknown"),
            (["loadtest", "eu-west", "--service", "nope", "--id", "lt-nope"], "lt-nope"),
            (
                ["runbook", "run", "runbooks/region-drain.yaml", "-p", "region=xx-nowhere",
                 "--id", "rb-unknown"],
                "rb-unknown",
            ),
            (["training", "supervise", "no-such-job"], "training-no-such-job"),
            (["schedule", "create", "loadtest", "sched-unknown", "--region", "xx-nowhere"],
             None),
        ],
    )  # fmt: skip
    async def test_refused(self, stack: Stack, args: list[str], workflow_id: str | None) -> None:
        code, out, err = await cli(stack, *args)
        assert code != 0, out
        assert len(err.strip().splitlines()) == 1, err
        assert "unknown" in err and "nothing was started" in err, err
        if workflow_id is not None:
            with pytest.raises(RPCError):
                await stack.client.get_workflow_handle(workflow_id).describe()
        else:
            with pytest.raises(RPCError):
                await stack.client.get_schedule_handle("sched-unknown").describe()
