"""The runbooks shipped in runbooks/: clean, ordered as a drain must be, and paired."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.exceptions import RunbookError
from orchestrator.policy.drain.maelstrom import dag_of, simulate, topological_layers
from orchestrator.runbook import REGISTRY, Runbook, lint_file, load_runbook, nested_runbooks

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
SHIPPED = sorted(RUNBOOKS.glob("*.yaml"))


def ancestors(runbook: Runbook, task_id: str) -> set[str]:
    found: set[str] = set()
    stack = list(runbook.task(task_id).dependencies)
    while stack:
        dep = stack.pop()
        if dep not in found:
            found.add(dep)
            stack.extend(runbook.task(dep).dependencies)
    return found


@pytest.fixture(scope="module")
def drain() -> Runbook:
    return load_runbook(RUNBOOKS / "region-drain.yaml", {"region": "eu-west"})


@pytest.fixture(scope="module")
def restore() -> Runbook:
    return load_runbook(RUNBOOKS / "region-restore.yaml", {"region": "eu-west"})


class TestLintClean:
    """Every shipped runbook lints clean and binds with just its region or building."""

    def test_shipped_set(self) -> None:
        names = {p.name for p in SHIPPED}
        assert {"region-drain.yaml", "region-restore.yaml", "region-drill.yaml"} <= names
        assert {"building-maintenance.yaml", "building-loss.yaml", "building-restore.yaml"} <= names

    @pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
    def test_clean(self, path: Path) -> None:
        assert lint_file(path) == []
        where = {"building": "b1"} if path.stem.startswith("building-") else {"region": "r1"}
        assert load_runbook(path, where).name == path.stem


class TestDrainOrder:
    """User traffic, then sessions, then stateless pools, then kv and batch."""

    def test_the_edge_drain_is_the_region_drains_edge(self, drain: Runbook) -> None:
        edge = load_runbook(RUNBOOKS / "edge-drain.yaml", {"region": "eu-west"})
        # what HAProxy steers, in the same order with the same steps and gates
        assert [t.id for t in edge.tasks] == [
            "steady-state",
            "shift-user-traffic",
            "teardown-sessions",
            "drain-web-pool",
            "verify-drained",
        ]
        for task in edge.tasks[1:4]:
            same = drain.task(task.id)
            assert (task.args, task.steps, task.gates) == (same.args, same.steps, same.gates)

    def test_order(self, drain: Runbook) -> None:
        templates = {t.id: t.template for t in drain.tasks}
        assert templates["shift-user-traffic"] == "traffic_shift"
        assert "shift-user-traffic" in ancestors(drain, "teardown-sessions")
        for pool in ("drain-web-pool", "drain-cache-pool"):
            assert "teardown-sessions" in ancestors(drain, pool)
        for stateful in ("move-kv-primaries", "stop-batch-jobs"):
            assert {"drain-web-pool", "drain-cache-pool"} <= ancestors(drain, stateful)

    def test_traffic_shift_starts_small_and_is_gated(self, drain: Runbook) -> None:
        shift = drain.task("shift-user-traffic")
        assert shift.steps is not None
        progress = shift.steps.progress()
        assert progress[0] < 0.1 and len(progress) >= 5
        assert shift.gates and shift.pre_conditions and shift.post_conditions
        assert shift.gates[0].region == "others-of(eu-west)"

    def test_parallel_where_the_dag_allows(self, drain: Runbook) -> None:
        layers = topological_layers(dag_of(drain, "real"))
        assert ["drain-web-pool", "drain-cache-pool"] in layers
        schedule = simulate(dag_of(drain, "real"))
        assert schedule.makespan_s < schedule.sequential_s


#: each shipped drain and its restore: the whole region, and what an HAProxy edge carries
PAIRS = [("region-drain", "region-restore"), ("edge-drain", "edge-restore")]


@pytest.fixture(params=PAIRS, ids=lambda pair: pair[0])
def pair(request: pytest.FixtureRequest) -> tuple[Runbook, Runbook]:
    drain, restore = (
        load_runbook(RUNBOOKS / f"{n}.yaml", {"region": "eu-west"}) for n in request.param
    )
    assert drain.restore_runbook == restore.name
    return drain, restore


class TestPairing:
    """Every mutating drain task is undone by a task of the restore runbook, in reverse."""

    def test_each_restore_exists_and_matches(self, pair: tuple[Runbook, Runbook]) -> None:
        drain, restore = pair
        for task in drain.tasks:
            if not REGISTRY[task.template].mutates:
                continue
            assert isinstance(task.restore, str), task.id
            undo = restore.task(task.restore)
            assert undo.template == task.template
            assert undo.args.get("region") == task.args.get("region") == "eu-west"

    def test_restore_runs_in_reverse(self, pair: tuple[Runbook, Runbook]) -> None:
        drain, restore = pair
        undo_of = {t.id: t.restore for t in drain.tasks if isinstance(t.restore, str)}
        for task in drain.tasks:
            for dep in task.depends_on:
                if task.id in undo_of and dep in undo_of:
                    # dep ran before task in the drain, so its undo runs after task's undo
                    assert undo_of[task.id] in ancestors(restore, undo_of[dep]), (task.id, dep)

    def test_drill_reuses_the_drain(self) -> None:
        drill = load_runbook(RUNBOOKS / "region-drill.yaml", {"region": "eu-west"})
        assert drill.mode_for("real") == "drill"
        nested = drill.task("drain")
        assert nested.args["runbook"] == "region-drain"
        assert drill.task("restore").undoes == "drain"
        drain = load_runbook(RUNBOOKS / "region-drain.yaml")
        assert {t.when for t in drain.tasks} == {"always", "drill", "real"}


class TestNestedRunbooks:
    """A runbook's nested runbooks (and their restores) are found, linted and given
    unbound to the run, so the workflow reads no files; a missing one is an error."""

    def test_drill_nests_drain_and_restore(self) -> None:
        drill = load_runbook(RUNBOOKS / "region-drill.yaml", {"region": "eu-west"})
        nested = nested_runbooks(drill, RUNBOOKS)
        assert set(nested) == {"region-drain", "region-restore"}
        # unbound: the nesting task binds its own parameters at run time
        assert nested["region-drain"].parameters["region"].default is None

    def test_drain_nests_nothing(self, drain: Runbook) -> None:
        assert nested_runbooks(drain, RUNBOOKS) == {}

    def test_missing_nested_runbook(self, tmp_path: Path) -> None:
        drill = load_runbook(RUNBOOKS / "region-drill.yaml", {"region": "eu-west"})
        with pytest.raises(RunbookError, match="region-drain"):
            nested_runbooks(drill, tmp_path)
