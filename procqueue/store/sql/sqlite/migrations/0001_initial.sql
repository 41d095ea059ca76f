-- Times are UNIX seconds (REAL) written by the caller's clock.
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    args TEXT NOT NULL,
    result TEXT,
    error TEXT,
    progress TEXT,
    fraction REAL,
    key TEXT UNIQUE,
    serial_key TEXT,
    tags TEXT NOT NULL DEFAULT '[]',
    steps TEXT NOT NULL DEFAULT '{}',
    timeout REAL,
    max_memory INTEGER,
    backoff TEXT NOT NULL,
    on_failure TEXT,
    run_at REAL NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    deadline_at REAL,
    owner TEXT,
    lease_until REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
-- (Indexes read the same in sql/postgres/migrations/0001_initial.sql: their
-- syntax is common to both dialects.)
-- The claim path: pending jobs in claim order.
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS jobs_running ON jobs (owner, queue) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_deadline ON jobs (deadline_at) WHERE state = 'pending' AND deadline_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at);
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY,
    concurrency INTEGER,
    paused INTEGER NOT NULL DEFAULT 0
);
