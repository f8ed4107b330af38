"""The agent in its tmux pane: observing it, typing into it, relaunching it, and the rules that decide when."""
