"""Structured logs: JSON lines when stderr is not a terminal, colours when it is.

Three small processors do the project-specific work:

- :func:`add_temporal_context` binds workflow id, run id and activity name
  inside an activity, so every line an activity writes says which run it serves;
- :func:`redact_secrets` replaces the value of any key that looks like a secret
  (token, api_key, password, authorization...) and any known secret value that
  appears inside a string, so a secret never reaches a log;
- :func:`register_secret` teaches the redactor a value read from configuration.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = [
    "REDACTED",
    "add_temporal_context",
    "configure_logging",
    "get_logger",
    "redact_secrets",
    "register_secret",
]

REDACTED = "[redacted]"

_SECRET_KEY = re.compile(
    r"(token|api[_-]?key|secret|password|passwd|authorization|private[_-]?key|signature)",
    re.IGNORECASE,
)
_known_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Make sure ``value`` never appears in a log line, whatever key carries it."""
    if value and len(value) >= 4:
        _known_secrets.add(value)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        for secret in _known_secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and _SECRET_KEY.search(k) else _scrub(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v) for v in value)
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key in list(event_dict):
        if _SECRET_KEY.search(key):
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _scrub(event_dict[key])
    return event_dict


def add_temporal_context(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    # Imported lazily: this module is shared vocabulary and must not pull the
    # SDK into processes that never touch Temporal (the lab, Locust).
    try:
        from temporalio import activity
    except ImportError:  # pragma: no cover - temporalio is a hard dependency
        return event_dict
    if activity.in_activity():
        info = activity.info()
        event_dict.setdefault("workflow_id", info.workflow_id)
        event_dict.setdefault("run_id", info.workflow_run_id)
        event_dict.setdefault("activity", info.activity_type)
        event_dict.setdefault("attempt", info.attempt)
    return event_dict


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    # Look stderr up when a logger is made, not when logging is configured, so
    # a redirected stderr (a daemon, a test capture) is honoured.
    return structlog.PrintLogger(sys.stderr)


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Configure structlog and the stdlib root logger once per process."""
    if json is None:
        json = not sys.stderr.isatty()
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            add_temporal_context,
            redact_secrets,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(
        level=numeric, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
