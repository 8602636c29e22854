"""Region drains and drills (Maelstrom): the phase plan, the capacity check, drill choice."""
