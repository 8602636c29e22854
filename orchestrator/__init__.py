"""DR and traffic orchestrator on Temporal."""
