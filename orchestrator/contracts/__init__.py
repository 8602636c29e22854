"""Workflow contracts: the inputs, updates, queries and results that starters, workflows and activities share."""
