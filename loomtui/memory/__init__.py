"""The agent's memory directory: its index, lint, search and add."""
