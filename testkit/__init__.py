"""What the tests and the benchmarks share: free ports, labs and workers started for a
run, the chaos trials and the fuzz campaign.

Benchmarks run the same trials and campaigns as the tests, with more of everything, so
that code lives here, where both can import it: benchmarks never import ``tests``
(import-linter's ``benchmarks-tests`` contract), and nothing here does either.
"""
