"""Triggered runbooks: Alertmanager webhooks and manual API calls that start runbook runs.

``payload`` (Alertmanager's webhook format and its size limits), ``auth`` (bearer /
timestamped HMAC), ``rules`` (which alert starts which runbook, with what parameters),
``episodes`` (when a firing group is the same trouble) and ``metrics`` are pure or
nearly; ``intake`` applies episodes, dedup, cooldown (``cooldown``) and resolved
signals through the ``starter`` port, ``manual`` starts runs by hand; ``boundary``
bounds what a client can make the server read, and ``server`` is the FastAPI app.
"""
