"""What a workflow run costs Temporal: its payload sizes and the events of its histories.

Two views, used by the training trace benchmark and its test (issue 24: no payload over
256 KB, every run's history under 10,000 events):

- :class:`RecordingCodec`, a pass-through payload codec that keeps the size of every
  payload the client and worker encode or decode (workflow inputs and results, activity
  arguments and results, child and continue-as-new inputs, query answers);
- :func:`audit_chain`, which reads every run of a workflow (its continue-as-new chain)
  and of the child workflows those runs started, through the client's
  ``fetch_history``, and gives each run's event count and largest payload.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.message import Message
from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import DataConverter, PayloadCodec

__all__ = [
    "HistoryAudit",
    "RecordingCodec",
    "RunAudit",
    "audit_chain",
    "child_peak_rss_mb",
    "recording_converter",
]

_PAYLOAD = Payload.DESCRIPTOR.full_name


class RecordingCodec(PayloadCodec):
    """Changes nothing; remembers the largest payloads seen (serialized bytes)."""

    def __init__(self, top: int = 5) -> None:
        self.count = 0
        self.total_bytes = 0
        self._top = top
        #: the largest sizes, descending, with the payload's type hint (its first bytes)
        self.largest: list[tuple[int, str]] = []

    def _see(self, payloads: Sequence[Payload]) -> None:
        for p in payloads:
            size = p.ByteSize()
            self.count += 1
            self.total_bytes += size
            if len(self.largest) < self._top or size > self.largest[-1][0]:
                self.largest.append((size, p.data[:60].decode(errors="replace")))
                self.largest.sort(key=lambda x: -x[0])
                del self.largest[self._top :]

    @property
    def max_bytes(self) -> int:
        return self.largest[0][0] if self.largest else 0

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self._see(payloads)
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self._see(payloads)
        return list(payloads)


def recording_converter(base: DataConverter) -> tuple[DataConverter, RecordingCodec]:
    """``base`` with a :class:`RecordingCodec` (it must have no codec of its own)."""
    if base.payload_codec is not None:
        raise ValueError("the data converter already has a payload codec")
    codec = RecordingCodec()
    return dataclasses.replace(base, payload_codec=codec), codec


class RunAudit(BaseModel):
    workflow_id: str
    run_id: str
    events: int
    max_payload_bytes: int
    #: the event type carrying the largest payload
    max_payload_event: str = ""


class HistoryAudit(BaseModel):
    runs: list[RunAudit] = Field(default_factory=list)

    @property
    def max_events(self) -> int:
        return max((r.events for r in self.runs), default=0)

    @property
    def max_payload(self) -> RunAudit | None:
        return max(self.runs, key=lambda r: r.max_payload_bytes, default=None)

    def summary(self, which: Callable[[str], bool]) -> dict[str, Any]:
        """Counts over the runs whose workflow id ``which`` picks (one family)."""
        mine = [r for r in self.runs if which(r.workflow_id)]
        top = max(mine, key=lambda r: r.max_payload_bytes, default=None)
        return {
            "runs": len(mine),
            "max_events": max((r.events for r in mine), default=0),
            "total_events": sum(r.events for r in mine),
            "max_payload_bytes": 0 if top is None else top.max_payload_bytes,
            "max_payload_event": "" if top is None else top.max_payload_event,
        }


def _payloads(msg: Message) -> Iterator[Payload]:
    """Every Payload inside ``msg``, however deep (maps and repeated fields included)."""
    for field, value in msg.ListFields():
        kind = field.message_type
        if kind is None:
            continue
        if kind.GetOptions().map_entry:
            values = value.values()
            if kind.fields_by_name["value"].message_type is None:
                continue
        elif isinstance(value, Message):
            values = [value]
        else:  # a repeated field
            values = value
        for v in values:
            if v.DESCRIPTOR.full_name == _PAYLOAD:
                yield v
            else:
                yield from _payloads(v)


async def audit_chain(client: Client, workflow_id: str, first_run_id: str) -> HistoryAudit:
    """Every run of ``workflow_id`` from ``first_run_id`` on, and every child they started."""
    audit = HistoryAudit()
    todo: list[tuple[str, str | None]] = [(workflow_id, first_run_id)]
    while todo:
        wid, rid = todo.pop()
        history = await client.get_workflow_handle(wid, run_id=rid).fetch_history()
        run = RunAudit(
            workflow_id=wid, run_id=rid or "", events=len(history.events), max_payload_bytes=0
        )
        for event in history.events:
            for p in _payloads(event):
                if p.ByteSize() > run.max_payload_bytes:
                    run.max_payload_bytes = p.ByteSize()
                    run.max_payload_event = event.WhichOneof("attributes") or ""
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                nxt = event.workflow_execution_continued_as_new_event_attributes
                todo.append((wid, nxt.new_execution_run_id))
            if event.HasField("child_workflow_execution_started_event_attributes"):
                child = event.child_workflow_execution_started_event_attributes
                todo.append((child.workflow_execution.workflow_id, child.workflow_execution.run_id))
        audit.runs.append(run)
    return audit


def child_peak_rss_mb(name: str) -> float | None:
    """Peak RSS (VmHWM) of this process's child whose command line names ``name``."""
    me = str(os.getpid())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            ppid = stat.rsplit(")", 1)[1].split()[1]
            if ppid != me or name not in (proc / "cmdline").read_text(errors="replace"):
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
        except (OSError, IndexError):
            continue
    return None
