-- on_failure handlers run once per give-up; chores run by one supervisor at a time;
-- the pid of the child running a job, for operators.
ALTER TABLE jobs ADD COLUMN failure_handled INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS jobs_failure_unhandled ON jobs (id)
    WHERE state = 'failed' AND on_failure IS NOT NULL AND failure_handled = 0;
CREATE TABLE IF NOT EXISTS chores (
    name TEXT PRIMARY KEY,
    last_run REAL NOT NULL
);
ALTER TABLE jobs ADD COLUMN pid INTEGER;
