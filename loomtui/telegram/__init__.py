"""The Telegram operator channel: the outbox sender and the optional command poller.

Importing this package must stay cheap (no python-telegram-bot): `loom status` reads
`state` through it. The loops live in `sender` and `commands`; `python -m loomtui.telegram`
runs them standalone until SIGTERM.
"""
