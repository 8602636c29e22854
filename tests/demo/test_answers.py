"""The demo's count of what users were answered, read from the data plane's own counters."""

from __future__ import annotations

from orchestrator.demo.answers import count_frontend_answers

# HAProxy 2.6's exporter, trimmed: two PoP frontends and the exporter's own frontend
EXPOSITION = """\
# HELP haproxy_frontend_http_responses_total Total number of HTTP responses
# TYPE haproxy_frontend_http_responses_total counter
haproxy_frontend_http_responses_total{proxy="nyc",code="1xx"} 0
haproxy_frontend_http_responses_total{proxy="lon",code="1xx"} 0
haproxy_frontend_http_responses_total{proxy="stats",code="1xx"} 0
haproxy_frontend_http_responses_total{proxy="nyc",code="2xx"} 14195
haproxy_frontend_http_responses_total{proxy="lon",code="2xx"} 9453
haproxy_frontend_http_responses_total{proxy="stats",code="2xx"} 3
haproxy_frontend_http_responses_total{proxy="nyc",code="4xx"} 2
haproxy_frontend_http_responses_total{proxy="lon",code="5xx"} 17
haproxy_frontend_http_responses_total{proxy="stats",code="5xx"} 1
haproxy_frontend_http_responses_total{proxy="nyc",code="other"} 1
# HELP haproxy_frontend_connections_total Total number of new connections
# TYPE haproxy_frontend_connections_total counter
haproxy_frontend_connections_total{proxy="nyc"} 500
"""


class TestFrontendAnswers:
    """Every answer a PoP frontend gave counts, 5xx apart; other proxies and metrics do not."""

    def test_sums_the_pops_answers_and_their_5xx(self) -> None:
        assert count_frontend_answers(EXPOSITION, ["nyc", "lon"]) == (14195 + 2 + 1 + 9453 + 17, 17)

    def test_the_exporters_own_frontend_is_not_a_user(self) -> None:
        assert count_frontend_answers(EXPOSITION, ["lon"]) == (9453 + 17, 17)

    def test_no_pops_no_answers(self) -> None:
        assert count_frontend_answers(EXPOSITION, []) == (0, 0)
