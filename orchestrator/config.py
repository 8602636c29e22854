"""Settings: the environment, then a TOML file, then defaults.

The Temporal client follows Temporal's own conventions through
``temporalio.envconfig`` (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
TEMPORAL_TLS_*, TEMPORAL_PROFILE and TOML profiles in TEMPORAL_CONFIG_FILE), so
one worker binary connects to the dev server, a self-hosted cluster with mTLS,
or Temporal Cloud. Everything else this project needs is read from
``ORCHESTRATOR_*`` variables or the ``[orchestrator]`` table of the TOML file
named by ``ORCHESTRATOR_CONFIG`` (default ``./orchestrator.toml`` when present).

Invalid settings raise :class:`~orchestrator.exceptions.ConfigError`, whose one
line names the setting; nothing starts half-configured.

Secrets (tokens, API keys) lose surrounding whitespace when read, since a file or a
``$(cat ...)`` ends in a newline and an HTTP client quotes the whole header in its
error; one with a control character inside is refused by name, never by value.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from temporalio.envconfig import ClientConfigProfile

from orchestrator.exceptions import ConfigError
from orchestrator.logging import register_secret

__all__ = ["DEFAULT_TASK_QUEUE", "Settings", "TemporalSettings", "clean_secret", "load_settings"]

DEFAULT_TASK_QUEUE = "orchestrator"
DEFAULT_TEMPORAL_ADDRESS = "127.0.0.1:7233"
DEFAULT_FLEET_URL = "http://127.0.0.1:8080"

#: environment variable -> setting name, for the settings that are ours
_ENV_NAMES: dict[str, str] = {
    "ORCHESTRATOR_FLEET_URL": "fleet_url",
    "ORCHESTRATOR_FLEET_TOKEN": "fleet_token",
    "ORCHESTRATOR_FLEET_TOKEN_FILE": "fleet_token_file",
    "ORCHESTRATOR_FLEET_VERIFY_TLS": "fleet_verify_tls",
    "ORCHESTRATOR_FLEET_CA_FILE": "fleet_ca_file",
    "ORCHESTRATOR_FLEET_TIMEOUT_S": "fleet_timeout_s",
    "ORCHESTRATOR_TASK_QUEUE": "task_queue",
    "ORCHESTRATOR_METRICS_ADDRESS": "metrics_address",
    "ORCHESTRATOR_LOG_LEVEL": "log_level",
    "ORCHESTRATOR_STATE_DIR": "state_dir",
    "ORCHESTRATOR_FLEET": "fleet",
    "ORCHESTRATOR_HAPROXY_SOCKET": "haproxy_socket",
    "ORCHESTRATOR_HAPROXY_MAP": "haproxy_map",
    "ORCHESTRATOR_HAPROXY_TOPOLOGY": "haproxy_topology",
    "ORCHESTRATOR_HAPROXY_SERVER": "haproxy_server",
    "ORCHESTRATOR_HAPROXY_FULL_WEIGHT": "haproxy_full_weight",
    "ORCHESTRATOR_HEALTH": "health",
    "ORCHESTRATOR_PROMETHEUS_URL": "prometheus_url",
    "ORCHESTRATOR_HEALTH_QUERIES": "health_queries",
}
_SETTING_TO_ENV = {v: k for k, v in _ENV_NAMES.items()}


def clean_secret(setting: str, value: str | None) -> str | None:
    """``value`` without surrounding whitespace, registered with the log redaction.

    None for an unset or blank value. A control character (or DEL) left inside is a
    :class:`ConfigError` naming ``setting`` only: the value itself is never printed.
    """
    if value is None:
        return None
    register_secret(value)
    value = value.strip()
    if not value:
        return None
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in value):
        raise ConfigError(setting, "contains a control character (the value is not shown)")
    register_secret(value)
    return value


class TemporalSettings(BaseModel):
    """How to reach Temporal; built from ``temporalio.envconfig``."""

    model_config = ConfigDict(frozen=True)

    address: str = DEFAULT_TEMPORAL_ADDRESS
    namespace: str = "default"
    api_key: SecretStr | None = None
    #: False, True (system roots), or the connect-time TLS config from a profile
    tls: Any = False
    rpc_metadata: dict[str, str] = Field(default_factory=dict)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``temporalio.client.Client.connect``."""
        kwargs: dict[str, Any] = {
            "target_host": self.address,
            "namespace": self.namespace,
            "tls": self.tls,
        }
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key.get_secret_value()
        if self.rpc_metadata:
            kwargs["rpc_metadata"] = dict(self.rpc_metadata)
        return kwargs


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    task_queue: str = Field(default=DEFAULT_TASK_QUEUE, min_length=1)
    fleet_url: str = DEFAULT_FLEET_URL
    fleet_token: SecretStr | None = None
    fleet_token_file: Path | None = None
    fleet_verify_tls: bool = True
    fleet_ca_file: Path | None = None
    fleet_timeout_s: float = Field(default=10.0, gt=0, le=600)
    #: host:port for the SDK runtime's Prometheus metrics; empty disables them
    metrics_address: str = ""
    log_level: str = "INFO"
    #: where run history (task durations for stuck detection, reports) is kept
    state_dir: Path = Path(".orchestrator")
    #: which Fleet the worker drives: the v1 HTTP API, or an HAProxy's runtime API
    #: (docs/fleet-contract.md, "HAProxy")
    fleet: Literal["http", "haproxy"] = "http"
    #: the runtime API: ``unix:/path``, ``/path``, ``tcp:host:port`` or ``host:port``
    haproxy_socket: str = "/run/haproxy/admin.sock"
    #: the routing map as HAProxy names it: the file path in haproxy.cfg's map() converter
    haproxy_map: str = "/etc/haproxy/maps/routing.map"
    #: a Topology (YAML or JSON): regions, PoPs, services, bucket_count
    haproxy_topology: Path | None = None
    #: the server that carries a service in a region, as ``backend/server``
    haproxy_server: str = "{service}/{region}"
    #: the HAProxy weight of a pool at weight 1.0 (HAProxy weights are 0..256)
    haproxy_full_weight: int = Field(default=100, ge=1, le=256)
    #: where gates, load tests and the rebalancer read health: the fleet's own
    #: ``health`` call, or PromQL against a Prometheus (docs/metrics.md)
    health: Literal["fleet", "prometheus"] = "fleet"
    #: the Prometheus to ask; overrides the ``url`` of the queries file
    prometheus_url: str | None = None
    #: which PromQL answers which number (orchestrator/promhealth/config.py); default:
    #: the queries for services exporting the lab's counters and histograms
    health_queries: Path | None = None

    @field_validator("fleet_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("prometheus_url")
    @classmethod
    def _prometheus_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return None if value is None else value.rstrip("/")

    @model_validator(mode="after")
    def _prometheus_named(self) -> Settings:
        if self.health == "prometheus" and not (self.prometheus_url or self.health_queries):
            raise ValueError(
                "prometheus_url: required with ORCHESTRATOR_HEALTH=prometheus (or a "
                "queries file naming its url in ORCHESTRATOR_HEALTH_QUERIES)"
            )
        return self

    @field_validator("haproxy_server")
    @classmethod
    def _server_template(cls, value: str) -> str:
        backend, sep, server = value.partition("/")
        if not sep or "{region}" not in value or "{service}" not in value:
            raise ValueError("must be backend/server naming both {service} and {region}")
        return value

    @field_validator("metrics_address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if value:
            _check_host_port(value)
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return value.upper()

    def fleet_token_value(self) -> str | None:
        """The fleet token, from the setting or the file it names."""
        if self.fleet_token is not None:
            return self.fleet_token.get_secret_value()
        if self.fleet_token_file is not None:
            try:
                text = self.fleet_token_file.read_text()
            except OSError as exc:
                raise ConfigError(
                    "ORCHESTRATOR_FLEET_TOKEN_FILE", exc.strerror or str(exc)
                ) from exc
            return clean_secret("ORCHESTRATOR_FLEET_TOKEN_FILE", text)
        return None


def _check_host_port(value: str) -> None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")


def _temporal_settings(env: Mapping[str, str]) -> TemporalSettings:
    try:
        profile = ClientConfigProfile.load(
            profile=env.get("TEMPORAL_PROFILE") or None,
            override_env_vars=dict(env),
        )
    except Exception as exc:  # the Rust loader raises plain RuntimeError
        raise ConfigError("TEMPORAL_CONFIG_FILE", str(exc)) from exc
    connect = profile.to_client_connect_config()
    address = connect.get("target_host") or DEFAULT_TEMPORAL_ADDRESS
    try:
        _check_host_port(address)
    except ValueError as exc:
        raise ConfigError("TEMPORAL_ADDRESS", str(exc)) from exc
    api_key = clean_secret("TEMPORAL_API_KEY", connect.get("api_key"))
    return TemporalSettings(
        address=address,
        namespace=connect.get("namespace") or "default",
        api_key=SecretStr(api_key) if api_key else None,
        tls=connect.get("tls", False),
        rpc_metadata=dict(connect.get("rpc_metadata") or {}),
    )


def _toml_table(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError("ORCHESTRATOR_CONFIG", f"{path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("ORCHESTRATOR_CONFIG", f"{path}: {exc}") from exc
    table = data.get("orchestrator", {})
    if not isinstance(table, dict):
        raise ConfigError("ORCHESTRATOR_CONFIG", f"{path}: [orchestrator] must be a table")
    return table


def load_settings(
    env: Mapping[str, str] | None = None, config_file: Path | None = None
) -> Settings:
    """Read settings; raise :class:`ConfigError` naming the first bad setting."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    if config_file is None and env.get("ORCHESTRATOR_CONFIG"):
        config_file = Path(env["ORCHESTRATOR_CONFIG"])
    elif config_file is None and Path("orchestrator.toml").is_file():
        config_file = Path("orchestrator.toml")
    if config_file is not None:
        raw.update(_toml_table(config_file))
    for var, name in _ENV_NAMES.items():
        if env.get(var):
            raw[name] = env[var]
    if isinstance(raw.get("fleet_token"), str):
        setting = (
            "ORCHESTRATOR_FLEET_TOKEN" if env.get("ORCHESTRATOR_FLEET_TOKEN") else "fleet_token"
        )
        raw["fleet_token"] = clean_secret(setting, raw["fleet_token"])
    try:
        settings = Settings(temporal=_temporal_settings(env), **raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else "settings"
        reason = error["msg"].removeprefix("Value error, ")
        field, sep, rest = reason.partition(": ")
        if not error["loc"] and sep and field in _SETTING_TO_ENV:
            # a rule across settings names the one to set in its message
            name, reason = field, rest
        raise ConfigError(_SETTING_TO_ENV.get(name, name), reason) from None
    except TypeError as exc:
        raise ConfigError("ORCHESTRATOR_CONFIG", str(exc)) from None
    return settings
