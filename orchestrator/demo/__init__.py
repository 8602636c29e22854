"""The main scenario on the embedded stack (``orchestrator demo``, ``make demo``).

Like the lab, the demo is not production code: it may import :mod:`orchestrator.lab`.
"""
