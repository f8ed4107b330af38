"""`loom pump`: owns a stream-json CLI's stdin and stdout in the agent's pane (docs/STREAM.md)."""
