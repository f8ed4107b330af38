"""The agent CLI's own hooks as Loom's second witness (docs/HOOKS.md): the settings file Loom writes
for each agent, the events its hooks leave in the agent's directory, and the dispatch witness."""
