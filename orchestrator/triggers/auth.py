"""Who may start runs: a bearer token, or an HMAC-SHA256 signature of a timestamp and
the raw body.

Alertmanager's ``webhook_config.http_config.authorization`` sends
``Authorization: Bearer <credentials>``; the token is checked from the headers alone,
before a byte of the body is read. Other senders can sign instead:

- ``X-Signature-Timestamp: <unix seconds>``, the time of signing;
- ``X-Signature-SHA256: sha256=<hex>`` (the prefix is optional), the HMAC-SHA256
  with the shared secret of ``<timestamp>.<body>``: the timestamp's decimal digits,
  one ``.``, then the body's exact bytes.

A timestamp more than :data:`SIGNATURE_WINDOW_S` from the server's clock is
refused before the body is read, so a captured request cannot be replayed later
(inside the window a replayed alert is deduplicated like any repeat, and a manual
run with an idempotency key returns the same run). Every comparison is
constant-time. Secrets come from the environment or files and are registered with
the log redactor as soon as they are read.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from orchestrator.config import clean_secret
from orchestrator.exceptions import ConfigError

__all__ = [
    "SIGNATURE_HEADER",
    "SIGNATURE_WINDOW_S",
    "TIMESTAMP_HEADER",
    "AuthMethod",
    "Credentials",
    "authenticate",
    "bearer_ok",
    "load_credentials",
    "sign",
    "signature_headers",
    "signature_ok",
    "timestamp_problem",
]

SIGNATURE_HEADER = "X-Signature-SHA256"
TIMESTAMP_HEADER = "X-Signature-Timestamp"
#: how far a signature's timestamp may be from the server's clock, either way
SIGNATURE_WINDOW_S = 300
AuthMethod = Literal["bearer", "hmac"]


class Credentials(BaseModel):
    model_config = ConfigDict(frozen=True)

    bearer: SecretStr | None = None
    hmac_secret: SecretStr | None = None

    @property
    def configured(self) -> bool:
        return self.bearer is not None or self.hmac_secret is not None


def _secret(value: str | None, path: Path | None, setting: str) -> SecretStr | None:
    if value and path is not None:
        raise ConfigError(setting, "give the value or a file, not both")
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{setting}_FILE", f"{path}: {exc.strerror or exc}") from None
        value = clean_secret(f"{setting}_FILE", text)
        if not value:
            raise ConfigError(f"{setting}_FILE", f"{path} is empty")
    else:
        value = clean_secret(setting, value)
    if not value:
        return None
    if len(value) < 16:
        # A short secret is guessable by anyone who can reach the port.
        raise ConfigError(setting, "must be at least 16 characters")
    return SecretStr(value)


def load_credentials(
    token: str | None = None,
    token_file: Path | None = None,
    hmac_secret: str | None = None,
    hmac_secret_file: Path | None = None,
) -> Credentials:
    """Credentials from values or files; raises :class:`ConfigError` naming the setting."""
    credentials = Credentials(
        bearer=_secret(token, token_file, "ORCHESTRATOR_TRIGGERS_TOKEN"),
        hmac_secret=_secret(hmac_secret, hmac_secret_file, "ORCHESTRATOR_TRIGGERS_HMAC_SECRET"),
    )
    if not credentials.configured:
        raise ConfigError(
            "ORCHESTRATOR_TRIGGERS_TOKEN",
            "set a bearer token or an HMAC secret (or their _FILE variants); "
            "the trigger server never runs unauthenticated",
        )
    return credentials


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of ``<timestamp>.<body>``: what goes in ``X-Signature-SHA256``."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_headers(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """Both headers a sender adds to sign ``body`` at ``now`` (default: the clock)."""
    timestamp = int(time.time() if now is None else now)
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: f"sha256={sign(secret, body, timestamp)}",
    }


def bearer_ok(credentials: Credentials, authorization: str | None) -> bool:
    """Whether ``Authorization`` carries the configured bearer token."""
    if credentials.bearer is None or not authorization:
        return False
    scheme, _, token = authorization.strip().partition(" ")
    expected = credentials.bearer.get_secret_value().encode()
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected)


def timestamp_problem(
    value: str | None, now: float, window_s: float = SIGNATURE_WINDOW_S
) -> str | None:
    """Why a signature's timestamp is not acceptable at ``now``; None when it is."""
    if not value or not value.strip().isdigit() or len(value.strip()) > 12:
        return f"{TIMESTAMP_HEADER} must be the signing time in unix seconds"
    skew = abs(now - int(value.strip()))
    if skew > window_s:
        return (
            f"{TIMESTAMP_HEADER} is {skew:.0f}s from the server's clock (at most {window_s:.0f}s)"
        )
    return None


def signature_ok(
    credentials: Credentials, signature: str | None, timestamp: str | None, body: bytes
) -> bool:
    """Whether ``signature`` is the HMAC of ``timestamp`` and ``body`` (the timestamp's
    window is :func:`timestamp_problem`'s business)."""
    if credentials.hmac_secret is None or not signature or not timestamp:
        return False
    if not timestamp.strip().isdigit() or len(timestamp.strip()) > 12:
        return False
    given = signature.strip().removeprefix("sha256=").lower()
    expected = sign(credentials.hmac_secret.get_secret_value(), body, int(timestamp.strip()))
    return hmac.compare_digest(given.encode(), expected.encode())


def authenticate(
    credentials: Credentials,
    *,
    authorization: str | None,
    signature: str | None,
    body: bytes,
    timestamp: str | None = None,
    now: float | None = None,
) -> AuthMethod | None:
    """How the request proved itself, or None when it did not (the whole check in one
    call; the server does it in two halves so as to refuse before reading the body)."""
    if bearer_ok(credentials, authorization):
        return "bearer"
    current = time.time() if now is None else now
    if timestamp_problem(timestamp, current) is None and signature_ok(
        credentials, signature, timestamp, body
    ):
        return "hmac"
    return None
