"""Traffic rebalancing (Taiji): the bucket model, the LP and its column generation, damping."""
