"""What users were answered: the demo counts edge answers and 5xx from the data plane itself.

The Python lab counts every answer it gives (``/lab/truth``, served with ``--faults``).
With HAProxy as the data plane the count is HAProxy's own: each PoP frontend's
``haproxy_frontend_http_responses_total`` from its Prometheus exporter, which includes
the 503s HAProxy gives itself when a region's queue is full, answers the backends never
see.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["AnswerCounter", "count_frontend_answers", "haproxy_answers", "lab_truth_answers"]

#: (answers so far, of which 5xx), read afresh on each call
AnswerCounter = Callable[[], Awaitable[tuple[int, int]]]

_RESPONSES = "haproxy_frontend_http_responses_total"


def lab_truth_answers(lab: httpx.AsyncClient) -> AnswerCounter:
    """The Python lab's own count of the edge answers it gave, by PoP and status."""

    async def count() -> tuple[int, int]:
        truth = (await lab.get("/lab/truth")).json()
        served: dict[str, dict[str, int]] = truth.get("edge_requests", {})
        total = sum(n for by_status in served.values() for n in by_status.values())
        errors = sum(
            n for by_status in served.values() for s, n in by_status.items() if s[0] == "5"
        )
        return total, errors

    return count


def count_frontend_answers(exposition: str, frontends: Iterable[str]) -> tuple[int, int]:
    """(answers, 5xx) of ``frontends`` in HAProxy's exporter text; other proxies (the
    ``stats`` frontend that serves the exporter) are not users' answers."""
    wanted = set(frontends)
    total = errors = 0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name != _RESPONSES or sample.labels.get("proxy") not in wanted:
                continue
            # "other" counts answers HAProxy could not classify; users still got them
            total += int(sample.value)
            if sample.labels.get("code") == "5xx":
                errors += int(sample.value)
    return total, errors


def haproxy_answers(client: httpx.AsyncClient, metrics_url: str, pops: list[str]) -> AnswerCounter:
    """HAProxy's count over the PoP frontends (named as the PoPs), from its exporter."""

    async def count() -> tuple[int, int]:
        response = await client.get(metrics_url)
        response.raise_for_status()
        return count_frontend_answers(response.text, pops)

    return count
