"""Prompt texts of the memrl agents, one module per agent (kept apart from the control flow that uses them)."""
