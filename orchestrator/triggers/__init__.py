"""Triggered runbooks: Alertmanager webhooks and manual API calls that start runbook runs.

``payload`` (Alertmanager's webhook format), ``auth`` (bearer / HMAC) and ``rules``
(which alert starts which runbook, with what parameters, under which workflow id)
are pure; ``intake`` applies dedup, cooldown and resolved signals through the
``starter`` port; ``server`` is the FastAPI app.
"""
