"""Typed undo records read the untyped ones that recorded runs wrote, and write the same JSON.

The records come from the committed histories (tests/histories): task states in reports and
the drain records a restore read, as the workers that ran them serialized them.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from orchestrator.contracts.runbook import DrainRecord, TaskState
from orchestrator.contracts.runbook_undo import (
    HostsQuarantine,
    HostsQuarantineArgs,
    ShardReturn,
    TrafficRelease,
    Undo,
)

HISTORIES = Path(__file__).parents[1] / "histories"
UNDO: TypeAdapter[Undo] = TypeAdapter(Undo)


def _payloads(node: Any) -> list[Any]:
    """Every JSON payload in a history, decoded."""
    found = []
    if isinstance(node, dict):
        meta = node.get("metadata", {})
        if "data" in node and meta.get("encoding") == base64.b64encode(b"json/plain").decode():
            found.append(json.loads(base64.b64decode(node["data"])))
        for value in node.values():
            found.extend(_payloads(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_payloads(value))
    return found


def _undos(node: Any) -> list[dict[str, Any]]:
    """Every undo record in a decoded payload: a task's ``undo`` or a value of ``records``
    / ``restore_records``."""
    found = []
    if isinstance(node, dict):
        if isinstance(node.get("undo"), dict):
            found.append(node["undo"])
        for key in ("records", "restore_records"):
            if isinstance(node.get(key), dict):
                found.extend(v for v in node[key].values() if isinstance(v, dict))
        for value in node.values():
            found.extend(_undos(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_undos(value))
    return found


def recorded() -> list[dict[str, Any]]:
    undos = []
    for name in ("region_drain", "region_restore", "drill"):
        history = json.loads((HISTORIES / f"{name}.json").read_text())
        for payload in _payloads(history):
            undos.extend(_undos(payload))
    return undos


RECORDED = recorded()


class TestRecordedUndos:
    def test_histories_hold_every_kind_the_drains_record(self) -> None:
        kinds = {u["template"] for u in RECORDED}
        assert kinds >= {"traffic_release", "service_weight", "shard_return", "job_update"}

    @pytest.mark.parametrize("raw", RECORDED, ids=lambda u: str(u["template"]))
    def test_reads_and_writes_back_the_same_json(self, raw: dict[str, Any]) -> None:
        typed = UNDO.validate_python(raw)
        assert typed.template == raw["template"]
        written = json.loads(UNDO.dump_json(typed))
        # Same keys and values; a field the record did not have is written as null.
        assert {k: v for k, v in written["args"].items() if k in raw["args"]} == raw["args"]
        assert all(written["args"][k] is None for k in written["args"].keys() - raw["args"])

    def test_a_traffic_record_keeps_the_table_found(self) -> None:
        raw = next(u for u in RECORDED if u["template"] == "traffic_release")
        typed = UNDO.validate_python(raw)
        assert isinstance(typed, TrafficRelease)
        assert typed.args.table == raw["args"]["table"]
        assert typed.args.held is raw["args"]["held"]


class TestInModels:
    def test_task_state_and_drain_record_carry_the_typed_kind(self) -> None:
        state = TaskState.model_validate(
            {
                "id": "t",
                "template": "shard_shift",
                "undo": {
                    "template": "shard_return",
                    "args": {"service": "kv", "region": "eu-west", "moved": ["s1"]},
                },
            }
        )
        assert isinstance(state.undo, ShardReturn)
        assert state.undo.args.moved == ["s1"] and state.undo.args.owned is None
        record = DrainRecord(
            records={"hosts-back": HostsQuarantine(args=HostsQuarantineArgs(hosts=["h1"]))}
        )
        again = DrainRecord.model_validate_json(record.model_dump_json())
        assert again == record

    def test_an_unknown_kind_is_refused_naming_it(self) -> None:
        with pytest.raises(ValidationError) as caught:
            UNDO.validate_python({"template": "teleport", "args": {}})
        assert "teleport" in str(caught.value) and "template" in str(caught.value)

    def test_a_missing_field_is_refused_naming_it(self) -> None:
        with pytest.raises(ValidationError) as caught:
            UNDO.validate_python({"template": "service_weight", "args": {"region": "eu-west"}})
        assert "service" in str(caught.value) and "weight" in str(caught.value)
