"""The fleet the settings describe: the v1 HTTP API (default) or an HAProxy's runtime API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.config import Settings
from orchestrator.exceptions import ConfigError
from orchestrator.fleet.protocol import Fleet

if TYPE_CHECKING:
    from orchestrator.fleet.haproxy import HAProxyFleet

__all__ = ["fleet_from_settings", "haproxy_fleet"]


def fleet_from_settings(settings: Settings) -> Fleet:
    if settings.fleet == "haproxy":
        return haproxy_fleet(settings)
    from orchestrator.fleet.http import HttpFleet

    verify: bool | str = settings.fleet_verify_tls
    if settings.fleet_verify_tls and settings.fleet_ca_file is not None:
        verify = str(settings.fleet_ca_file)
    return HttpFleet(
        settings.fleet_url,
        token=settings.fleet_token_value(),
        timeout=settings.fleet_timeout_s,
        verify=verify,
    )


def haproxy_fleet(settings: Settings) -> HAProxyFleet:
    """The HAProxy fleet of ``ORCHESTRATOR_HAPROXY_*`` (docs/fleet-contract.md, "HAProxy")."""
    from orchestrator.fleet.haproxy import HAProxyFleet, RuntimeApi, load_topology

    if settings.haproxy_topology is None:
        raise ConfigError(
            "ORCHESTRATOR_HAPROXY_TOPOLOGY",
            "required with ORCHESTRATOR_FLEET=haproxy (regions, PoPs, services, bucket_count)",
        )
    try:
        runtime = RuntimeApi(settings.haproxy_socket, timeout_s=settings.fleet_timeout_s)
    except ValueError as exc:
        raise ConfigError("ORCHESTRATOR_HAPROXY_SOCKET", str(exc)) from None
    return HAProxyFleet(
        runtime,
        load_topology(settings.haproxy_topology),
        routing_map=settings.haproxy_map,
        server=settings.haproxy_server,
        full_weight=settings.haproxy_full_weight,
    )
