-- Batches: a named group of jobs whose completion callbacks are
-- enqueued in the transaction that records its last member's outcome.
-- complete_job / success_job hold the handler jobs prepared at creation (JSON
-- of models.BatchCallback); completions counts the times the batch completed
-- (a retry of its members reopens it), and names each callback's key.
CREATE TABLE IF NOT EXISTS batches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    complete_job TEXT,
    success_job TEXT,
    created_at REAL NOT NULL,
    sealed_at REAL,
    cancelled_at REAL,
    completed_at REAL,
    completions INTEGER NOT NULL DEFAULT 0
);
ALTER TABLE jobs ADD COLUMN batch_id INTEGER;
-- (Indexes read the same in sql/postgres/migrations/0005_batches.sql.)
-- Counts per state, members in id order, and "is any member still open?".
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs (batch_id, state, id) WHERE batch_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS batches_created ON batches (created_at);
CREATE INDEX IF NOT EXISTS batches_open ON batches (id) WHERE completed_at IS NULL;
