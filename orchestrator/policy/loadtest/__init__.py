"""Live load tests (Kraken): step plans, capacity estimates, the simulator."""
