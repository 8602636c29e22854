"""Temporal's client side: start, steer and read workflows from outside a worker.

The CLI, the demo, reports, benchmarks, tests and activities that look at other
workflows share these. They name workflows and queries by their contract (the type
name, the models of ``orchestrator.contracts``), never by the workflow code, so none of
them imports ``workflows``.
"""
