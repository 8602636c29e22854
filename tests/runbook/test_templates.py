"""The template registry: built-ins, derived restores, and templates a user adds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.models import StrictModel
from orchestrator.runbook import REGISTRY, InlineRestore, Template, lint_text
from orchestrator.runbook.templates import TemplateRegistry
from tests.runbook.helpers import runbook_text

BUILTINS = {
    "traffic_shift",
    "service_weight",
    "shard_shift",
    "job_update",
    "config_change",
    "wait_for",
    "approval",
    "notify",
    "runbook",
    "load_test",
    "delay",
}


class TestBuiltins:
    """Every template the format names is registered with the right nature."""

    def test_names(self) -> None:
        assert set(REGISTRY.names()) >= BUILTINS

    def test_mutating_and_stepped(self) -> None:
        assert REGISTRY["traffic_shift"].mutates and REGISTRY["traffic_shift"].stepped
        assert REGISTRY["shard_shift"].stepped
        assert not REGISTRY["wait_for"].mutates
        assert not REGISTRY["job_update"].stepped

    def test_derived_restores_undo(self) -> None:
        assert REGISTRY["job_update"].restore_for({"operation": "stop", "region": "a"}) == (
            InlineRestore(
                template="job_update", args={"operation": "start", "jobs": [], "region": "a"}
            )
        )
        shard = REGISTRY["shard_shift"].restore_for({"service": "kv", "region": "a"})
        assert shard is not None and shard.args["direction"] == "in"
        traffic = REGISTRY["traffic_shift"].restore_for({"region": "a", "ratio": 0.0})
        assert traffic is not None and traffic.args["ratio"] == 1.0
        assert REGISTRY["config_change"].restore_for({"path": "/x", "content": ""}) is None

    def test_args_are_validated(self) -> None:
        with pytest.raises(ValidationError, match="jobs"):
            REGISTRY["job_update"].validate_args({"operation": "stop"})
        with pytest.raises(ValidationError, match="url"):
            REGISTRY["notify"].validate_args({"url": "not a url", "message": "m"})
        with pytest.raises(ValidationError, match="peers"):
            REGISTRY["shard_shift"].validate_args({"service": "kv", "region": "a", "peers": ["a"]})

    def test_unknown_name_lists_known(self) -> None:
        with pytest.raises(KeyError, match="traffic_shift"):
            REGISTRY["trafic_shift"]


class TestUserTemplates:
    """A user's template, added with the decorator, is linted like a built-in."""

    def test_decorator_registers_and_lint_uses_it(self) -> None:
        registry = REGISTRY.copy()

        @registry.template(
            "drain_queue",
            mutates=True,
            stepped=True,
            restore=lambda a: InlineRestore(
                template="drain_queue", args={"queue": a.queue, "ratio": 1.0}
            ),
        )
        class DrainQueueArgs(StrictModel):
            """Move a queue's consumers out of a region."""

            queue: str
            ratio: float

        text = runbook_text(
            "- id: q\n  template: drain_queue\n  args: {queue: jobs, ratio: 0}\n"
            "  steps: 2 x 50%\n  restore: auto\n"
        )
        assert lint_text(text, registry=registry) == []
        # The process-wide registry is untouched, so there it is unknown.
        assert [f.code for f in lint_text(text)] == ["unknown-template"]
        tmpl = registry["drain_queue"]
        assert tmpl.description == "Move a queue's consumers out of a region."
        assert tmpl.args_model is DrainQueueArgs

        bad = text.replace("ratio: 0}", "ratio: lots}")
        assert [f.code for f in lint_text(bad, registry=registry)] == ["bad-args"]

    def test_duplicate_and_bad_names_refused(self) -> None:
        registry = TemplateRegistry()
        tmpl = Template("x", StrictModel, mutates=False, stepped=False)
        registry.register(tmpl)
        with pytest.raises(ValueError, match="already registered"):
            registry.register(tmpl)
        registry.register(tmpl, replace=True)
        with pytest.raises(ValueError, match="template name"):
            registry.register(Template("has space", StrictModel, False, False))
