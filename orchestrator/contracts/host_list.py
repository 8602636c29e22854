"""A list of host names that travels as ranges: ``b0-h0000..0255,b1-h0000..0255``.

The training supervisor keeps every failure's host lists and carries them across
continue-as-new. As plain JSON lists a 2,048-host job's failure record is 45 KB
and 25 of them 1.1 MB, past Temporal's 512 KB warning; as ranges of consecutive
names the same record is a few hundred bytes, whatever the job's size.

``HostList`` is ``list[str]`` in Python. On the wire (pydantic's JSON mode, which
the Temporal data converter uses) it is one string of comma-separated runs; a
run is a name, or ``<prefix><first>..<last>`` for names sharing a prefix whose
numeric suffixes (same width) go up by one. Order is kept, so the encoding is
exact for any list. It reads both forms, so histories written with plain lists
still decode; a list with a name the encoding cannot hold (a comma or ``..``
in it) is written as a plain list.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

__all__ = ["HostList", "compact_cluster", "decode_hosts", "encode_hosts", "expand_cluster"]

_NAME = re.compile(r"^(.*?)(\d+)$")
_RUN = re.compile(r"^(.*?)(\d+)\.\.(\d+)$")


def _split(name: str) -> tuple[str, str] | None:
    m = _NAME.match(name)
    return (m.group(1), m.group(2)) if m else None


def encode_hosts(hosts: list[str]) -> str | list[str]:
    """The compact string for ``hosts``, or the list itself when a name cannot be encoded."""
    if any("," in h or ".." in h or not h for h in hosts):
        return list(hosts)
    runs: list[str] = []
    i = 0
    while i < len(hosts):
        head = _split(hosts[i])
        j = i + 1
        if head is not None:
            prefix, digits = head
            while j < len(hosts):
                nxt = _split(hosts[j])
                if (
                    nxt is None
                    or nxt[0] != prefix
                    or len(nxt[1]) != len(digits)
                    or int(nxt[1]) != int(digits) + (j - i)
                ):
                    break
                j += 1
        if j - i == 1:
            runs.append(hosts[i])
        else:
            last = _split(hosts[j - 1])
            assert last is not None  # the loop only extends over names that split
            runs.append(f"{hosts[i]}..{last[1]}")
        i = j
    return ",".join(runs)


def decode_hosts(value: Any) -> Any:
    """``encode_hosts``'s string back to the list; anything else is left to pydantic."""
    if not isinstance(value, str):
        return value
    out: list[str] = []
    for run in value.split(",") if value else []:
        m = _RUN.match(run)
        if m is None:
            out.append(run)
            continue
        prefix, first, last = m.group(1), m.group(2), m.group(3)
        width = len(first)
        out.extend(f"{prefix}{n:0{width}d}" for n in range(int(first), int(last) + 1))
    return out


HostList = Annotated[
    list[str],
    BeforeValidator(decode_hosts),
    PlainSerializer(encode_hosts, return_type=Any, when_used="json"),
]


def compact_cluster(cluster: dict[str, Any]) -> dict[str, Any]:
    """A ``TrainingCluster``'s JSON with its hosts as runs: 306 KB -> a few KB at 2,048 hosts.

    Consecutive hosts that differ only by name (same region, building, GPUs,
    state, job, all GPUs healthy) become one row whose ``names`` is a host-list
    string; any other host stays a row of its own. Order is kept. Job host lists
    become host-list strings too. :func:`expand_cluster` undoes it exactly.
    """
    rows: list[dict[str, Any]] = []
    group: list[str] = []
    shape: dict[str, Any] | None = None

    def flush() -> None:
        if shape is not None:
            rows.append({**shape, "names": encode_hosts(group)})

    for host in cluster.get("hosts", []):
        health = host.get("gpu_health") or []
        if not all(health) or len(health) != host.get("gpus"):
            flush()
            shape, group = None, []
            rows.append(host)
            continue
        this = {k: v for k, v in host.items() if k not in ("name", "gpu_health")}
        if this != shape:
            flush()
            shape, group = this, []
        group.append(host["name"])
    flush()
    jobs = [{**j, "hosts": encode_hosts(j.get("hosts", []))} for j in cluster.get("jobs", [])]
    return {**cluster, "hosts": rows, "jobs": jobs, "compact": 1}


def expand_cluster(value: Any) -> Any:
    """:func:`compact_cluster`'s form back to a ``TrainingCluster``'s; anything else as is."""
    if not isinstance(value, dict) or value.get("compact") != 1:
        return value
    hosts: list[dict[str, Any]] = []
    for row in value["hosts"]:
        if "names" not in row:
            hosts.append(row)
            continue
        shape = {k: v for k, v in row.items() if k != "names"}
        hosts.extend(
            {**shape, "name": n, "gpu_health": [True] * shape["gpus"]}
            for n in decode_hosts(row["names"])
        )
    jobs = [{**j, "hosts": decode_hosts(j["hosts"])} for j in value.get("jobs", [])]
    rest = {k: v for k, v in value.items() if k not in ("hosts", "jobs", "compact")}
    return {**rest, "hosts": hosts, "jobs": jobs}
