"""The store's schema, as an ordered list of named forward migrations.

Migrations are named rather than numbered so that features built side by side cannot claim
the same number; each one runs once, inside the transaction that records it. Append only:
never edit or reorder a migration that has shipped.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_foundation",
        """
        CREATE TABLE meta (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        CREATE TABLE ledger (
            id        INTEGER PRIMARY KEY,
            ts        REAL    NOT NULL,
            kind      TEXT    NOT NULL,
            source    TEXT    NOT NULL,
            cause     TEXT,
            detail    TEXT    NOT NULL,
            prev_hash TEXT    NOT NULL,
            hash      TEXT    NOT NULL
        );
        CREATE INDEX ledger_kind ON ledger(kind, id);
        CREATE TABLE heartbeats (
            name   TEXT PRIMARY KEY,
            ts     REAL NOT NULL,
            pid    INTEGER NOT NULL,
            detail TEXT NOT NULL DEFAULT '{}'
        );
        """,
    ),
    (
        "0002_outbox",
        """
        CREATE TABLE outbox (
            id                  INTEGER PRIMARY KEY,
            created             REAL    NOT NULL,
            chat_id             INTEGER,
            text                TEXT    NOT NULL,
            dedupe_key          TEXT,
            state               TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
            attempts            INTEGER NOT NULL DEFAULT 0,
            next_attempt        REAL    NOT NULL DEFAULT 0,
            telegram_message_id INTEGER,
            sent                REAL,
            last_error          TEXT
        );
        CREATE UNIQUE INDEX outbox_dedupe ON outbox(dedupe_key) WHERE dedupe_key IS NOT NULL;
        CREATE INDEX outbox_state ON outbox(state, id);
        """,
    ),
    (
        "0003_sentinel",
        """
        CREATE TABLE job_runs (
            id            INTEGER PRIMARY KEY,
            job           TEXT    NOT NULL,
            started       REAL    NOT NULL,
            ended         REAL,
            exit_code     INTEGER,
            duration      REAL,
            error         TEXT,
            failure_lines INTEGER NOT NULL DEFAULT 0,
            pid           INTEGER,
            reviewed      INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX job_runs_job ON job_runs(job, started);
        CREATE INDEX job_runs_unreviewed ON job_runs(id) WHERE reviewed = 0;
        CREATE TABLE scan_offsets (
            job          TEXT PRIMARY KEY,
            path         TEXT    NOT NULL,
            dev          INTEGER,
            inode        INTEGER,
            offset       INTEGER NOT NULL DEFAULT 0,
            carry        BLOB    NOT NULL DEFAULT x'',
            carry_len    INTEGER NOT NULL DEFAULT 0,
            carry_skip   INTEGER NOT NULL DEFAULT 0,
            head         BLOB    NOT NULL DEFAULT x'',
            watch_since  REAL    NOT NULL,
            missed_mark  REAL,
            updated      REAL    NOT NULL
        );
        CREATE TABLE queue_items (
            id              INTEGER PRIMARY KEY,
            job             TEXT    NOT NULL,
            kind            TEXT    NOT NULL,
            signature       TEXT    NOT NULL,
            sample          TEXT    NOT NULL,
            log             TEXT    NOT NULL,
            first_seen      REAL    NOT NULL,
            last_seen       REAL    NOT NULL,
            count           INTEGER NOT NULL DEFAULT 1,
            state           TEXT    NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'claimed', 'witnessed')),
            nudges          INTEGER NOT NULL DEFAULT 0,
            last_nudge_at   REAL,
            escalated_at    REAL,
            reopened_at     REAL,
            reopens         INTEGER NOT NULL DEFAULT 0,
            claimed_at      REAL,
            claimed_by      TEXT,
            claimed_session TEXT,
            claim_dev       INTEGER,
            claim_inode     INTEGER,
            claim_offset    INTEGER,
            note            TEXT,
            witnessed_at    REAL,
            witness_run     INTEGER
        );
        CREATE UNIQUE INDEX queue_live ON queue_items(job, kind, signature) WHERE state != 'witnessed';
        CREATE INDEX queue_state ON queue_items(state, id);
        """,
    ),
    (
        "0004_canary",
        """
        CREATE TABLE canary_runs (
            id          INTEGER PRIMARY KEY,
            nonce       TEXT    NOT NULL UNIQUE,
            source      TEXT    NOT NULL,
            session_id  TEXT,
            launch_seq  INTEGER NOT NULL DEFAULT 0,
            in_grace    INTEGER NOT NULL DEFAULT 0,
            sent_at     REAL    NOT NULL,
            deadline    REAL    NOT NULL,
            ack_at      REAL,
            latency     REAL,
            result      TEXT    NOT NULL DEFAULT 'pending',
            why         TEXT    NOT NULL DEFAULT ''
        );
        CREATE INDEX canary_runs_result ON canary_runs(result, id);
        """,
    ),
    (
        "0005_scan_mtime",
        """
        ALTER TABLE scan_offsets ADD COLUMN mtime_ns INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE scan_offsets ADD COLUMN prev_inode INTEGER
        """,
    ),
    (
        "0006_scan_prev_head",
        """
        ALTER TABLE scan_offsets ADD COLUMN prev_head BLOB
        """,
    ),
    (
        "0007_counters",
        """
        CREATE TABLE counters (
            name TEXT NOT NULL,
            labels TEXT NOT NULL,
            value REAL NOT NULL DEFAULT 0,
            PRIMARY KEY (name, labels)
        ) WITHOUT ROWID
        """,
    ),
    (
        "0008_agents",
        # Several agents share one store: every per-agent row says whose it is. What was written
        # before agents had names belonged to the one agent there was, `main`.
        """
        ALTER TABLE ledger ADD COLUMN agent TEXT NOT NULL DEFAULT 'main';
        CREATE INDEX ledger_agent ON ledger(agent, id);
        ALTER TABLE canary_runs ADD COLUMN agent TEXT NOT NULL DEFAULT 'main';
        ALTER TABLE queue_items ADD COLUMN agent TEXT NOT NULL DEFAULT 'main'
        """,
    ),
    (
        "0009_agent_indexes",
        # One agent's events of one kind, newest first (its relaunches, its canary events): without
        # this SQLite walks ledger_agent through every event of the agent (a million in a year).
        """
        CREATE INDEX ledger_agent_kind ON ledger(agent, kind, id);
        CREATE INDEX canary_runs_agent ON canary_runs(agent, result, id)
        """,
    ),
    (
        "0010_monotonic_deadlines",
        # The start of a deadline on both clocks: the monotonic reading and the boot it belongs to,
        # beside the wall time (a probe's send: the next probe; an item's first sighting and its
        # claim: the backstops; a job run's start: whether it came after a claim). NULL on older
        # rows: those are measured by wall time, as before.
        """
        ALTER TABLE canary_runs ADD COLUMN sent_mono REAL;
        ALTER TABLE canary_runs ADD COLUMN boot TEXT;
        ALTER TABLE queue_items ADD COLUMN first_seen_mono REAL;
        ALTER TABLE queue_items ADD COLUMN first_seen_boot TEXT;
        ALTER TABLE queue_items ADD COLUMN claimed_mono REAL;
        ALTER TABLE queue_items ADD COLUMN claimed_boot TEXT;
        ALTER TABLE job_runs ADD COLUMN started_mono REAL;
        ALTER TABLE job_runs ADD COLUMN boot TEXT
        """,
    ),
    (
        "0011_job_run_identity",
        # The run-job's start as proctree.start_time reads it (clock ticks since boot on Linux),
        # beside its pid: the sentinel tells a live run-job from a later process given the same
        # pid by it (proctree.alive_as). NULL on older rows: an unfinished one counts as ended
        # without recording its exit, and a run-job still running records its end over that.
        """
        ALTER TABLE job_runs ADD COLUMN pid_started REAL
        """,
    ),
    (
        "0012_hook_events",
        # What the agent CLI's own hooks reported (loomtui/hooks), compactly: the event's name, its
        # session, its one qualifier (`source`: SessionStart's source, StopFailure's error type, a
        # Notification's type, PreCompact's trigger, PostToolUse's tool) and a small JSON detail
        # (a prompt's length and digests, never its text). `ts` is when the hook wrote the event.
        """
        CREATE TABLE hook_events (
            id         INTEGER PRIMARY KEY,
            agent      TEXT    NOT NULL,
            ts         REAL    NOT NULL,
            mono       REAL,
            boot       TEXT,
            event      TEXT    NOT NULL,
            session_id TEXT,
            source     TEXT,
            detail     TEXT    NOT NULL DEFAULT '{}'
        );
        CREATE INDEX hook_events_agent ON hook_events(agent, event, id)
        """,
    ),
    (
        "0013_canary_runs_by_agent",
        # One agent's last runs, newest first (the canary's every tick reads its last 50, and the
        # late acks' last 10): canary_runs_agent leads with the result, so SQLite fetched every run
        # of the agent and sorted them (2 ms a read with 3,000 runs, growing without end).
        """
        CREATE INDEX canary_runs_agent_id ON canary_runs(agent, id)
        """,
    ),
    (
        "0014_queue_reopened_on_both_clocks",
        # An item's reopen on both clocks, as its first sighting and its claim: the backstop runs
        # from the later of its sighting and its reopen. NULL on older rows: measured by wall time.
        """
        ALTER TABLE queue_items ADD COLUMN reopened_mono REAL;
        ALTER TABLE queue_items ADD COLUMN reopened_boot TEXT
        """,
    ),
    (
        "0015_outbox_rejections",
        # How often Telegram refused this very message (400), apart from the attempts an outage or
        # flood control cost: a message retried three times in an outage was given up at its first 400.
        """
        ALTER TABLE outbox ADD COLUMN rejections INTEGER NOT NULL DEFAULT 0
        """,
    ),
    (
        "0016_job_run_overrun",
        # When the sentinel told of a run still going after a whole period of its job's schedule and the
        # missed-run grace (a job hung on a mount never ends): told once a run, not at every pass.
        """
        ALTER TABLE job_runs ADD COLUMN overrun_at REAL
        """,
    ),
    (
        "0017_scan_offsets_renamed_from",
        # The name a job had before it was renamed (its log the same): a run that was going under the
        # old name at the rename ends under it (its run-job records its end by that name), and is the
        # renamed job's to judge and to time, not an orphan's.
        """
        ALTER TABLE scan_offsets ADD COLUMN renamed_from TEXT
        """,
    ),
    (
        "0018_queue_retired",
        # An item whose job is gone from the config is retired (no run of it will ever witness it):
        # it was nudged and escalated for good. A state the CHECK did not allow: the table is made
        # anew (SQLite alters no CHECK), every row and column kept, the indexes with it; a retired
        # item is no longer live, so the job added back opens new ones.
        """
        CREATE TABLE queue_items_new (
            id              INTEGER PRIMARY KEY,
            job             TEXT    NOT NULL,
            kind            TEXT    NOT NULL,
            signature       TEXT    NOT NULL,
            sample          TEXT    NOT NULL,
            log             TEXT    NOT NULL,
            first_seen      REAL    NOT NULL,
            last_seen       REAL    NOT NULL,
            count           INTEGER NOT NULL DEFAULT 1,
            state           TEXT    NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'claimed', 'witnessed', 'retired')),
            nudges          INTEGER NOT NULL DEFAULT 0,
            last_nudge_at   REAL,
            escalated_at    REAL,
            reopened_at     REAL,
            reopens         INTEGER NOT NULL DEFAULT 0,
            claimed_at      REAL,
            claimed_by      TEXT,
            claimed_session TEXT,
            claim_dev       INTEGER,
            claim_inode     INTEGER,
            claim_offset    INTEGER,
            note            TEXT,
            witnessed_at    REAL,
            witness_run     INTEGER,
            agent           TEXT    NOT NULL DEFAULT 'main',
            first_seen_mono REAL,
            first_seen_boot TEXT,
            claimed_mono    REAL,
            claimed_boot    TEXT,
            reopened_mono   REAL,
            reopened_boot   TEXT,
            retired_at      REAL
        );
        INSERT INTO queue_items_new (id, job, kind, signature, sample, log, first_seen, last_seen, count, state,
            nudges, last_nudge_at, escalated_at, reopened_at, reopens, claimed_at, claimed_by, claimed_session,
            claim_dev, claim_inode, claim_offset, note, witnessed_at, witness_run, agent, first_seen_mono,
            first_seen_boot, claimed_mono, claimed_boot, reopened_mono, reopened_boot)
        SELECT id, job, kind, signature, sample, log, first_seen, last_seen, count, state,
            nudges, last_nudge_at, escalated_at, reopened_at, reopens, claimed_at, claimed_by, claimed_session,
            claim_dev, claim_inode, claim_offset, note, witnessed_at, witness_run, agent, first_seen_mono,
            first_seen_boot, claimed_mono, claimed_boot, reopened_mono, reopened_boot FROM queue_items;
        DROP TABLE queue_items;
        ALTER TABLE queue_items_new RENAME TO queue_items;
        CREATE UNIQUE INDEX queue_live ON queue_items(job, kind, signature) WHERE state IN ('open', 'claimed');
        CREATE INDEX queue_state ON queue_items(state, id)
        """,
    ),
]
