"""The names a command gives are checked against the fleet's before anything starts."""

from __future__ import annotations

from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError

from orchestrator.commands.known import unknown_names
from orchestrator.commands.temporal_call import real_cause
from orchestrator.lab.config import load_config


class TestUnknownNames:
    """The pure check: every unknown name of a kind in one line, with what the fleet has;
    region selectors (all, others-of(...)) are not names."""

    def test_known_names_pass(self) -> None:
        topology = load_config(None).topology()
        assert unknown_names(topology, regions=["eu-west", "all"], services=["web"]) == []

    def test_unknown_names_are_named_with_what_exists(self) -> None:
        topology = load_config(None).topology()
        problems = unknown_names(
            topology, regions=["xx-nowhere", "eu-west"], services=["nope"], jobs=["j"]
        )
        assert problems[0].startswith("unknown region 'xx-nowhere' (the fleet has: ")
        assert "eu-west" in problems[0]
        assert problems[1].startswith("unknown service 'nope'")
        assert problems[2].startswith("unknown training job 'j'")

    def test_buildings_are_checked_and_region_of_is_a_selector(self) -> None:
        topology = load_config(None).topology()
        assert unknown_names(topology, regions=["region-of(euw-a)"], buildings=["euw-a"]) == []
        [problem] = unknown_names(topology, buildings=["euw-z"])
        assert problem.startswith("unknown building 'euw-z' (the fleet has: ")
        assert "euw-a" in problem


class TestRealCause:
    """A failed run is reported by its innermost cause and where it happened, never as
    "Activity task failed"."""

    def test_activity_failure_names_the_fleets_message(self) -> None:
        fleet = ApplicationError("HTTP 422: unknown service 'nope'", type="InvalidRequest")
        activity = ActivityError(
            "Activity task failed",
            scheduled_event_id=5,
            started_event_id=6,
            identity="w",
            activity_type="set_service_weight",
            activity_id="1",
            retry_state=None,
        )
        activity.__cause__ = fleet
        failure = WorkflowFailureError(cause=activity)
        assert real_cause(failure) == (
            "InvalidRequest: HTTP 422: unknown service 'nope' (in activity set_service_weight)"
        )
