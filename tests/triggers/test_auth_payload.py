"""Authentication and the Alertmanager payload model, without a server."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.exceptions import ConfigError
from orchestrator.logging import REDACTED, _scrub
from orchestrator.triggers.auth import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    authenticate,
    load_credentials,
    sign,
    signature_headers,
    timestamp_problem,
)
from orchestrator.triggers.payload import AlertmanagerPayload
from tests.triggers.payloads import HMAC_SECRET, TOKEN, alert, notification

BODY = b'{"version": "4"}'
NOW = 1_714_557_600.0


class TestAuthenticate:
    """A request proves itself with the exact bearer token, or an HMAC of a timestamp inside
    the window and its exact body."""

    creds = load_credentials(token=TOKEN, hmac_secret=HMAC_SECRET)

    def test_right_bearer_passes(self) -> None:
        got = authenticate(self.creds, authorization=f"Bearer {TOKEN}", signature=None, body=BODY)
        assert got == "bearer"

    def test_scheme_is_case_insensitive(self) -> None:
        got = authenticate(self.creds, authorization=f"bearer {TOKEN}", signature=None, body=BODY)
        assert got == "bearer"

    @pytest.mark.parametrize(
        "header",
        [None, "", "Bearer", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN[:-1]}"],
    )
    def test_wrong_or_missing_bearer_fails(self, header: str | None) -> None:
        assert authenticate(self.creds, authorization=header, signature=None, body=BODY) is None

    def test_hmac_of_timestamp_and_body_passes_with_or_without_prefix(self) -> None:
        digest = sign(HMAC_SECRET, BODY, int(NOW))
        for signature in (digest, f"sha256={digest}", digest.upper()):
            got = authenticate(
                self.creds,
                authorization=None,
                signature=signature,
                timestamp=str(int(NOW)),
                body=BODY,
                now=NOW,
            )
            assert got == "hmac"

    def test_signature_is_over_the_timestamp_then_a_dot_then_the_body(self) -> None:
        expected = hmac.new(HMAC_SECRET.encode(), b"1714557600." + BODY, hashlib.sha256)
        assert sign(HMAC_SECRET, BODY, 1714557600) == expected.hexdigest()
        headers = signature_headers(HMAC_SECRET, BODY, now=1714557600.9)
        assert headers == {
            TIMESTAMP_HEADER: "1714557600",
            SIGNATURE_HEADER: f"sha256={expected.hexdigest()}",
        }

    def test_hmac_of_another_body_key_or_timestamp_fails(self) -> None:
        stamp = int(NOW)
        for signature, timestamp in (
            (sign(HMAC_SECRET, BODY + b" ", stamp), stamp),
            (sign(HMAC_SECRET + "x", BODY, stamp), stamp),
            (sign(HMAC_SECRET, BODY, stamp), stamp + 1),
            ("00" * 32, stamp),
            ("not-hex", stamp),
        ):
            got = authenticate(
                self.creds,
                authorization=None,
                signature=signature,
                timestamp=str(timestamp),
                body=BODY,
                now=NOW,
            )
            assert got is None

    def test_a_signature_without_timestamp_fails(self) -> None:
        """The old format (HMAC of the body alone) is no longer enough."""
        bare = hmac.new(HMAC_SECRET.encode(), BODY, hashlib.sha256).hexdigest()
        got = authenticate(self.creds, authorization=None, signature=bare, body=BODY, now=NOW)
        assert got is None

    @pytest.mark.parametrize("age_s", [-301, 301, 3600, 86400 * 365])
    def test_a_replayed_old_or_future_signature_fails(self, age_s: int) -> None:
        """A captured request, replayed outside the window, is refused."""
        headers = signature_headers(HMAC_SECRET, BODY, now=NOW - age_s)
        got = authenticate(
            self.creds,
            authorization=None,
            signature=headers[SIGNATURE_HEADER],
            timestamp=headers[TIMESTAMP_HEADER],
            body=BODY,
            now=NOW,
        )
        assert got is None
        assert timestamp_problem(headers[TIMESTAMP_HEADER], NOW) is not None

    @pytest.mark.parametrize("age_s", [0, 299, -299])
    def test_a_signature_inside_the_window_passes(self, age_s: int) -> None:
        headers = signature_headers(HMAC_SECRET, BODY, now=NOW - age_s)
        got = authenticate(
            self.creds,
            authorization=None,
            signature=headers[SIGNATURE_HEADER],
            timestamp=headers[TIMESTAMP_HEADER],
            body=BODY,
            now=NOW,
        )
        assert got == "hmac"

    @pytest.mark.parametrize("value", [None, "", "soon", "-5", "1.5", "9" * 30])
    def test_a_malformed_timestamp_is_named(self, value: str | None) -> None:
        problem = timestamp_problem(value, NOW)
        assert problem is not None and TIMESTAMP_HEADER in problem

    def test_a_method_not_configured_never_passes(self) -> None:
        bearer_only = load_credentials(token=TOKEN)
        headers = signature_headers(HMAC_SECRET, BODY, now=NOW)
        got = authenticate(
            bearer_only,
            authorization=None,
            signature=headers[SIGNATURE_HEADER],
            timestamp=headers[TIMESTAMP_HEADER],
            body=BODY,
            now=NOW,
        )
        assert got is None


class TestCredentials:
    """Secrets come from values or files, are never too short, and never reach a log."""

    def test_none_configured_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="ORCHESTRATOR_TRIGGERS_TOKEN"):
            load_credentials()

    def test_short_secret_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="at least 16"):
            load_credentials(token="short")

    def test_read_from_file_and_redacted(self, tmp_path: Path) -> None:
        path = tmp_path / "token"
        path.write_text("file-token-abcdefghijklmnop\n")
        creds = load_credentials(token_file=path)
        assert creds.bearer is not None
        assert creds.bearer.get_secret_value() == "file-token-abcdefghijklmnop"
        assert "file-token-abcdefghijklmnop" not in repr(creds)
        assert _scrub("Bearer file-token-abcdefghijklmnop") == f"Bearer {REDACTED}"

    def test_missing_file_names_the_setting(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="ORCHESTRATOR_TRIGGERS_HMAC_SECRET_FILE"):
            load_credentials(hmac_secret_file=tmp_path / "absent")


class TestPayload:
    """The documented version-4 webhook body parses; a malformed one names the field."""

    def test_documented_payload_parses(self) -> None:
        body = notification(alert(region="eu-west"), alert("resolved", region="us-east"))
        payload = AlertmanagerPayload.model_validate(body)
        assert payload.group_key == body["groupKey"]
        assert [a.status for a in payload.alerts] == ["firing", "resolved"]
        assert payload.alerts[0].alertname == "RegionErrorRate"
        assert payload.alerts[0].labels["region"] == "eu-west"
        assert payload.alerts[0].ends_at is not None and payload.alerts[0].ends_at.year == 1

    def test_unknown_extra_fields_are_tolerated(self) -> None:
        body = notification(alert(region="eu-west"))
        body["someFutureField"] = 1
        body["alerts"][0]["silenceURL"] = "x"
        assert AlertmanagerPayload.model_validate(body).alerts[0].fingerprint

    @pytest.mark.parametrize(
        ("mutate", "loc"),
        [
            (lambda b: b.pop("groupKey"), ("groupKey",)),
            (lambda b: b.update(version="3"), ("version",)),
            (lambda b: b["alerts"][0].update(status="pending"), ("alerts", 0, "status")),
            (lambda b: b["alerts"][0].update(startsAt="yesterday"), ("alerts", 0, "startsAt")),
            (
                lambda b: b["alerts"][0]["labels"].update(region=3),
                ("alerts", 0, "labels", "region"),
            ),
            (lambda b: b["alerts"][0].pop("fingerprint"), ("alerts", 0, "fingerprint")),
        ],
    )
    def test_malformed_names_the_field(self, mutate: object, loc: tuple[object, ...]) -> None:
        body = notification(alert(region="eu-west"))
        mutate(body)  # type: ignore[operator]
        with pytest.raises(ValidationError) as info:
            AlertmanagerPayload.model_validate(body)
        assert info.value.errors()[0]["loc"] == loc
