"""The state directory's store: SQLite, its migrations and salvage, locks, the pinned session, the ledger and the outbox."""
