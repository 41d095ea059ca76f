-- Workflows: a job may depend on others (job_deps: job_id waits for depends_on).
-- An edge is resolved once its dependency is terminal; a dependent is blocked
-- while any of its edges is unresolved. An edge's dependency always existed
-- before its dependent (checked at enqueue), so no cycle can exist.
-- blocked_by names the dependency whose failure or cancel cancelled the job
-- (retrying that dependency puts the job back to blocked); snoozes counts the
-- times the job snoozed, against max_snoozes.
CREATE TABLE IF NOT EXISTS job_deps (
    job_id INTEGER NOT NULL,
    depends_on INTEGER NOT NULL,
    resolved INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, depends_on)
);
ALTER TABLE jobs ADD COLUMN allow_failure INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN blocked_by INTEGER;
ALTER TABLE jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN max_snoozes INTEGER NOT NULL DEFAULT 100;
-- (Indexes read as in sql/postgres/migrations/0008_workflows.sql.)
-- A dependency's dependents (promotion is O(its dependents)); "has the job
-- an unresolved edge left?" is one probe; retrying a dependency finds the
-- jobs its failure cancelled.
CREATE INDEX IF NOT EXISTS job_deps_depends_on ON job_deps (depends_on);
CREATE INDEX IF NOT EXISTS job_deps_open ON job_deps (job_id) WHERE resolved = 0;
CREATE INDEX IF NOT EXISTS jobs_blocked_by ON jobs (blocked_by) WHERE blocked_by IS NOT NULL;
