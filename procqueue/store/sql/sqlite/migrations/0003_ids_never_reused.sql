-- Ids are never reused (DESIGN.md section 6). Without AUTOINCREMENT, SQLite
-- gives a new row the largest id in the table plus one, so pruning the newest
-- jobs would hand their ids out again. SQLite cannot add AUTOINCREMENT to a
-- table: the table is rebuilt (create, copy, drop, rename, indexes again),
-- in the migration's one transaction. So the columns of 0001 and 0002 and
-- the indexes are written here again, as they are.
CREATE TABLE jobs_autoincrement (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
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
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    failure_handled INTEGER NOT NULL DEFAULT 0,
    pid INTEGER
);
INSERT INTO jobs_autoincrement (
    id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
    fraction, key, serial_key, tags, steps, timeout, max_memory, backoff, on_failure, run_at,
    created_at, started_at, finished_at, deadline_at, owner, lease_until, cancel_requested,
    failure_handled, pid)
SELECT
    id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
    fraction, key, serial_key, tags, steps, timeout, max_memory, backoff, on_failure, run_at,
    created_at, started_at, finished_at, deadline_at, owner, lease_until, cancel_requested,
    failure_handled, pid
FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_autoincrement RENAME TO jobs;
CREATE INDEX jobs_claim ON jobs (priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX jobs_running ON jobs (owner, queue) WHERE state = 'running';
CREATE INDEX jobs_finished ON jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_deadline ON jobs (deadline_at) WHERE state = 'pending' AND deadline_at IS NOT NULL;
CREATE INDEX jobs_created ON jobs (created_at);
CREATE INDEX jobs_failure_unhandled ON jobs (id)
    WHERE state = 'failed' AND on_failure IS NOT NULL AND failure_handled = 0;
