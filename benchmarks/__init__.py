"""Benchmarks: each ``benchmarks/<name>.py`` measures the project against a baseline in one run.

``python -m benchmarks`` runs them all and prints the summary table (see ``__main__``).
"""
