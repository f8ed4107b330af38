"""The canary: probes that prove the agent still hears, their records, their rules and their loop."""
