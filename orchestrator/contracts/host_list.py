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

__all__ = ["HostList", "decode_hosts", "encode_hosts"]

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
