"""Structured logs: JSON lines when stderr is not a terminal, colours when it is.

Three small processors do the project-specific work:

- :func:`add_temporal_context` binds workflow id, run id and activity name
  inside an activity, so every line an activity writes says which run it serves;
- :func:`redact_secrets` replaces the value of any key that looks like a secret
  (token, api_key, password, authorization...) and any known secret value that
  appears inside a string, so a secret never reaches a log;
- :func:`register_secret` teaches the redactor a value read from configuration.

Known secret values are also scrubbed from what does not pass through structlog:
every stdlib log record (the SDK's, uvicorn's, asyncio's, with their formatted
tracebacks), the final rendered structlog line (a console traceback included), and
uncaught-exception tracebacks. A secret arrives in odd places (a header error that
quotes the header, an exception message), so the scrubbing works on text, not keys.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import traceback
from collections.abc import Callable, MutableMapping
from types import TracebackType
from typing import Any

import structlog

__all__ = [
    "REDACTED",
    "add_temporal_context",
    "configure_logging",
    "get_logger",
    "redact",
    "redact_secrets",
    "register_secret",
]

REDACTED = "[redacted]"

_SECRET_KEY = re.compile(
    r"(token|api[_-]?key|secret|password|passwd|authorization|private[_-]?key|signature)",
    re.IGNORECASE,
)
_known_secrets: set[str] = set()
#: the same values, longest first, so a secret that contains another is replaced whole
_by_length: tuple[str, ...] = ()


def register_secret(value: str | None) -> None:
    """Make sure ``value`` never appears in a log line, whatever key carries it."""
    global _by_length
    if value and len(value) >= 4:
        _known_secrets.add(value)
        # As an exception message quotes it: repr of str or bytes escapes control characters.
        _known_secrets.add(repr(value)[1:-1])
        _by_length = tuple(sorted(_known_secrets, key=len, reverse=True))
        _install_text_redaction()


def redact(text: str) -> str:
    """``text`` with every registered secret value replaced by ``[redacted]``."""
    for secret in _by_length:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
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


def _redact_record(record: logging.LogRecord) -> None:
    """Scrub a stdlib record's message and traceback before any handler formats it."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: the handler reports it, args and all
        return
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, ()
    if record.exc_info and record.exc_info[1] is not None:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        clean = redact(text)
        if clean != text:
            # Formatter.format appends exc_text and formats exc_info only when
            # exc_text is unset; dropping exc_info keeps any handler from re-rendering it.
            record.exc_text, record.exc_info = clean, None


def _scrubbed_excepthook(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    sys.stderr.write(redact("".join(traceback.format_exception(exc_type, exc, tb))))


def _scrubbed_thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "unknown"
    text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
    sys.stderr.write(redact(f"Exception in thread {name}:\n{text}"))


_base_record_factory: Callable[..., logging.LogRecord] | None = None


def _install_text_redaction() -> None:
    """Once per process: scrub every stdlib record and every uncaught traceback.

    A record factory runs for every record of every logger, whoever configured its
    handlers (uvicorn and Temporal's SDK bring their own), and only once a record
    passed the level check, so it costs nothing for records nobody emits.
    """
    global _base_record_factory
    if _base_record_factory is not None:
        return
    base = _base_record_factory = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        if _by_length:
            _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)
    # Only the interpreter's own hooks are replaced; a test runner's or a debugger's stay.
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _scrubbed_excepthook
    if threading.excepthook is threading.__excepthook__:
        threading.excepthook = _scrubbed_thread_excepthook


def _scrubbed(renderer: Callable[..., Any]) -> Callable[..., Any]:
    # The last word on a structlog line: a console renderer formats exc_info into a
    # traceback after every processor ran, so the rendered text is scrubbed too.
    def render(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        out = renderer(logger, method, event_dict)
        return redact(out) if isinstance(out, str) else out

    return render


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
            _scrubbed(renderer),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(
        level=numeric, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
    _install_text_redaction()


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
