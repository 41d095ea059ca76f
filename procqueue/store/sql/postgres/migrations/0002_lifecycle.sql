-- on_failure handlers run once per give-up; chores run by one supervisor at a time;
-- the pid of the child running a job, for operators.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS failure_handled boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS jobs_failure_unhandled ON jobs (id)
    WHERE state = 'failed' AND on_failure IS NOT NULL AND NOT failure_handled;
CREATE TABLE IF NOT EXISTS chores (
    name text PRIMARY KEY,
    last_run double precision NOT NULL
);
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS pid integer;
