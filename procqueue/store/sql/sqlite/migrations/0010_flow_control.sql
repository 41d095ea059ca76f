-- Flow control. A job's rate_limit limits the starts of every job of its
-- name, its group_rate those of its group (group_key), a queue's rate those of
-- the queue: flow_limits holds each limited key's rate ('job:NAME',
-- 'group:G', 'queue:Q'; the latest enqueue or operator sets it) and
-- flow_starts one row per start counted against a key, written in the claim
-- that starts it (under the claim lock, so counts are exact cluster-wide).
-- group_limit caps a group's running jobs; flow_groups keeps when each group
-- was last served, so claims rotate across groups. debounce_until is the
-- latest run_at a debounced enqueue may move the job to.
-- Numbered 0010 by agreement (0009 belongs to hooks; the two touch different columns).
ALTER TABLE jobs ADD COLUMN group_key TEXT;
ALTER TABLE jobs ADD COLUMN group_limit INTEGER;
ALTER TABLE jobs ADD COLUMN rate_limit TEXT;
ALTER TABLE jobs ADD COLUMN group_rate TEXT;
ALTER TABLE jobs ADD COLUMN debounce_until REAL;
CREATE TABLE IF NOT EXISTS flow_limits (
    key TEXT PRIMARY KEY,
    rate INTEGER NOT NULL,
    period REAL NOT NULL,
    set_by TEXT,
    set_at REAL
);
CREATE TABLE IF NOT EXISTS flow_starts (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS flow_groups (
    group_key TEXT PRIMARY KEY,
    served_at REAL NOT NULL DEFAULT 0
);
-- (Indexes read the same in sql/postgres/migrations/0010_flow_control.sql.)
-- A key's starts in its window are one index range; groups in serving order;
-- a group's claimable jobs in claim order; a group's running jobs.
CREATE INDEX IF NOT EXISTS flow_starts_key ON flow_starts (key, at);
CREATE INDEX IF NOT EXISTS flow_groups_served ON flow_groups (served_at);
CREATE INDEX IF NOT EXISTS jobs_group_claim ON jobs (group_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_group_running ON jobs (group_key)
    WHERE state = 'running' AND group_key IS NOT NULL;
