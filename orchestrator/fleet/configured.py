"""The fleet the settings describe."""

from __future__ import annotations

from orchestrator.config import Settings
from orchestrator.fleet.protocol import Fleet

__all__ = ["fleet_from_settings"]


def fleet_from_settings(settings: Settings) -> Fleet:
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
