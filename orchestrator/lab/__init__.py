"""The local lab fleet: the fleet contract served with real (or modelled) traffic.

Used by tests, the demo and benchmarks; production code never imports it.
Start one with ``orchestrator lab serve`` or :func:`orchestrator.lab.server.build_app`.
"""
