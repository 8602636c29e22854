"""Who may start runs: a bearer token or an HMAC-SHA256 signature of the raw body.

Alertmanager's ``webhook_config.http_config.authorization`` sends
``Authorization: Bearer <credentials>``; other senders can sign the body instead
and send the hex digest in ``X-Signature-SHA256`` (an optional ``sha256=`` prefix
is accepted, as GitHub-style senders write it). Every comparison is constant-time.
Secrets come from the environment or files and are registered with the log
redactor as soon as they are read.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from orchestrator.config import clean_secret
from orchestrator.exceptions import ConfigError

__all__ = [
    "SIGNATURE_HEADER",
    "AuthMethod",
    "Credentials",
    "authenticate",
    "load_credentials",
    "sign",
]

SIGNATURE_HEADER = "X-Signature-SHA256"
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


def sign(secret: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``body``: what a sender puts in ``X-Signature-SHA256``."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def authenticate(
    credentials: Credentials,
    *,
    authorization: str | None,
    signature: str | None,
    body: bytes,
) -> AuthMethod | None:
    """How the request proved itself, or None when it did not."""
    if credentials.bearer is not None and authorization:
        scheme, _, token = authorization.strip().partition(" ")
        expected = credentials.bearer.get_secret_value().encode()
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected):
            return "bearer"
    if credentials.hmac_secret is not None and signature:
        given = signature.strip().removeprefix("sha256=").lower()
        expected_sig = sign(credentials.hmac_secret.get_secret_value(), body)
        if hmac.compare_digest(given.encode(), expected_sig.encode()):
            return "hmac"
    return None
