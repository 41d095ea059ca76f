-- The SQLite dialect of every named statement (see procqueue/store/_queries.py).
-- sql/postgres/queries.sql defines the same names with the same parameters: each
-- file holds its dialect's whole statement, so statements where the dialects agree
-- read the same in both (job_candidates, the longest, shares most of its lines).

-- schema_table_exists --
-- Whether this database has procqueue's migrations table; creates nothing.
SELECT EXISTS (
    SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'procqueue_schema') AS present

-- schema_version_get --
-- The applied schema version (0 when none).
SELECT coalesce(max(version), 0) AS version FROM procqueue_schema

-- schema_version_set --
-- Records that a migration was applied.
INSERT INTO procqueue_schema (version, applied_at) VALUES (:version, :now)

-- job_insert --
-- Inserts one job; a duplicate key inserts nothing and returns no row.
INSERT INTO jobs (name, queue, state, priority, max_attempts, args, key, serial_key, tags,
                  timeout, max_memory, backoff, on_failure, run_at, created_at, deadline_at,
                  batch_id, allow_failure, max_snoozes, headers,
                  group_key, group_limit, rate_limit, group_rate, debounce_until)
VALUES (:name, :queue, 'pending', :priority, :max_attempts, :args, :key, :serial_key, :tags,
        :timeout, :max_memory, :backoff, :on_failure, :run_at, :now, :deadline_at, :batch_id,
        :allow_failure, :max_snoozes, :headers,
        :group, :group_limit, :rate_limit, :group_rate, :debounce_until)
ON CONFLICT (key) DO NOTHING
RETURNING id

-- job_id_by_key --
-- The job holding an idempotency key.
SELECT id FROM jobs WHERE key = :key

-- job_get --
-- One job's public record.
SELECT id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
       fraction, key, serial_key, tags, run_at, created_at, started_at, finished_at, deadline_at,
       pid, owner
FROM jobs WHERE id = :id

-- job_list --
-- Jobs matching the given filters (NULL matches all), newest first.
SELECT id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
       fraction, key, serial_key, tags, run_at, created_at, started_at, finished_at, deadline_at,
       pid, owner
FROM jobs
WHERE (:state IS NULL OR state = :state AND (:state <> 'running' OR started_at IS NOT NULL)
       OR :state = 'reserved' AND state = 'running' AND started_at IS NULL)
  AND (:queue IS NULL OR queue = :queue)
  AND (:name IS NULL OR name = :name)
ORDER BY id DESC
LIMIT :limit

-- queue_limits --
-- Limits and paused flags of every configured queue.
SELECT name, concurrency, paused, limit_by, limit_at FROM queues

-- _claim_spent --
-- The rate limits spent in their window now (a part of job_candidates and job_group_heads).
WITH spent AS (
    SELECT l.key FROM flow_limits l
    WHERE l.rate <= (SELECT count(*) FROM flow_starts s
                     WHERE s.key = l.key AND s.at > :now - l.period))

-- _claim_columns --
-- What a claim reads of each candidate (a part of job_candidates and job_group_heads).
SELECT id, queue, serial_key, group_key, priority, run_at,
       (SELECT q.concurrency - (SELECT count(*) FROM jobs r
                                WHERE r.state = 'running' AND r.queue = jobs.queue)
        FROM queues q WHERE q.name = jobs.queue) AS room,
       group_limit - (SELECT count(*) FROM jobs g
                      WHERE g.state = 'running' AND g.group_key = jobs.group_key) AS group_room,
       (SELECT f.served_at FROM flow_groups f WHERE f.group_key = jobs.group_key) AS served_at,
       CASE WHEN rate_limit IS NOT NULL THEN 'job:' || name END AS job_rate_key,
       CASE WHEN group_rate IS NOT NULL THEN 'group:' || group_key END AS group_rate_key,
       CASE WHEN 'queue:' || queue IN (SELECT key FROM flow_limits) THEN 'queue:' || queue END
       AS queue_rate_key

-- _claim_filters --
-- The work a claim may take now (a part of job_candidates and job_group_heads): see
-- job_candidates.
  AND (deadline_at IS NULL OR deadline_at > :now)
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
  AND queue NOT IN (SELECT name FROM queues WHERE paused = 1)
  AND queue NOT IN (SELECT q.name FROM queues q WHERE q.concurrency IS NOT NULL
                    AND q.concurrency <= (SELECT count(*) FROM jobs r
                                          WHERE r.state = 'running' AND r.queue = q.name))
  AND (serial_key IS NULL OR serial_key NOT IN
       (SELECT s.serial_key FROM jobs s WHERE s.state = 'running' AND s.serial_key IS NOT NULL))
  AND (group_limit IS NULL OR group_key IS NULL
       OR group_limit > (SELECT count(*) FROM jobs g
                         WHERE g.state = 'running' AND g.group_key = jobs.group_key))
  AND (rate_limit IS NULL OR 'job:' || name NOT IN (SELECT key FROM spent))
  AND (group_rate IS NULL OR group_key IS NULL
       OR 'group:' || group_key NOT IN (SELECT key FROM spent))
  AND 'queue:' || queue NOT IN (SELECT key FROM spent)

-- job_candidates --
-- Due pending jobs in claim order, from the wanted queues (NULL: all), skipping paused queues,
-- queues at their limit, serial keys already running, groups at their group_limit and work
-- whose rate (flow_limits: the job's name, its group, its queue) is spent in its window (so
-- none of them can hide the jobs behind them); `room` is how many more of the queue may
-- start (NULL: no limit), `group_room` of the group; `served_at` is when the group was last
-- served; the rate keys name the limits a start counts against.
-- Mirrors the other dialect's job_candidates line for line (see the top of this file).
-- Walks the jobs_claim partial index.
<<_claim_spent>>
<<_claim_columns>>
FROM jobs
WHERE state = 'pending' AND run_at <= :now
<<_claim_filters>>
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- job_group_heads --
-- job_candidates, among the first 4 due jobs of each group in serving order (least recently
-- served first): the jobs that let a claim rotate across groups whatever their backlogs.
-- Probes each group's jobs_group_claim range.
<<_claim_spent>>
<<_claim_columns>>
FROM jobs
WHERE id IN (SELECT h.id
             FROM (SELECT group_key FROM flow_groups ORDER BY served_at LIMIT :limit) f
             JOIN jobs h ON h.id IN (
                 SELECT x.id FROM jobs x
                 WHERE x.group_key = f.group_key AND x.group_key IS NOT NULL
                   AND x.state = 'pending' AND x.run_at <= :now
                 ORDER BY x.group_key, x.priority DESC, x.run_at, x.id LIMIT 4))
  AND state = 'pending' AND run_at <= :now
<<_claim_filters>>

-- flow_rooms --
-- How many more starts each of `keys` allows in its window now (keys without a limit: none).
SELECT l.key, l.rate - (SELECT count(*) FROM flow_starts s
                        WHERE s.key = l.key AND s.at > :now - l.period) AS room
FROM flow_limits l WHERE l.key IN (SELECT value FROM json_each(:keys))

-- flow_start_add --
-- One start counted against each of `keys` (a key twice: two starts), at `now`.
INSERT INTO flow_starts (key, at) SELECT value, :now FROM json_each(:keys)

-- flow_starts_trim --
-- Forgets the starts of `keys` that left their window (or whose limit is gone) more than
-- `kept` seconds ago: a claim stamped before another that committed first still counts them.
DELETE FROM flow_starts AS s
WHERE s.key IN (SELECT value FROM json_each(:keys))
  AND s.at <= :now - :kept - coalesce((SELECT l.period FROM flow_limits l WHERE l.key = s.key), 0)

-- flow_group_served --
-- Records that a claim served `groups`, in that order, at base + 1e-6, base + 2e-6, ... (the
-- rotation puts them last).
INSERT INTO flow_groups (group_key, served_at)
SELECT value, :base + (key + 1) * 1e-6 FROM json_each(:groups) WHERE true
ON CONFLICT (group_key) DO UPDATE SET served_at = excluded.served_at

-- flow_group_add --
-- Groups that jobs were enqueued in join the rotation (as never served, when new).
INSERT INTO flow_groups (group_key) SELECT DISTINCT value FROM json_each(:groups) WHERE true
ON CONFLICT (group_key) DO NOTHING

-- flow_groups_prune --
-- Groups served before `before` that hold no job waiting, held or blocked leave the rotation.
DELETE FROM flow_groups AS f
WHERE f.served_at < :before
  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.group_key = f.group_key
                  AND j.state IN ('pending', 'running', 'blocked'))

-- flow_limit_set --
-- Sets a key's rate (the latest enqueue or operator wins; an enqueue's unchanged rate writes
-- nothing).
INSERT INTO flow_limits (key, rate, period, set_by, set_at)
VALUES (:key, :rate, :period, :by, :now)
ON CONFLICT (key) DO UPDATE
SET rate = excluded.rate, period = excluded.period, set_by = excluded.set_by,
    set_at = excluded.set_at
WHERE flow_limits.rate IS NOT excluded.rate OR flow_limits.period IS NOT excluded.period
   OR excluded.set_by IS NOT NULL

-- flow_limit_of --
-- The rates `keys` hold now (keys without one: no row).
SELECT key, rate, period FROM flow_limits WHERE key IN (SELECT value FROM json_each(:keys))

-- flow_limit_clear --
-- Removes a key's rate.
DELETE FROM flow_limits WHERE key = :key

-- flow_limit_list --
-- Every key's rate with the starts counted in its current window.
SELECT l.key, l.rate, l.period, l.set_by, l.set_at,
       (SELECT count(*) FROM flow_starts s
        WHERE s.key = l.key AND s.at > :now - l.period) AS used
FROM flow_limits l ORDER BY l.key

-- flow_starts_of --
-- The starts of one key in its window now, oldest first.
SELECT s.at FROM flow_starts s JOIN flow_limits l ON l.key = s.key
WHERE s.key = :key AND s.at > :now - l.period ORDER BY s.at

-- flow_group_held --
-- How many jobs of a group are held (running or reserved).
SELECT count(*) AS n FROM jobs WHERE state = 'running' AND group_key = :group

-- flow_held_back --
-- The rates spent and group limits reached now that hold back due pending work (for a claim
-- that came back short); the groups are found from their held jobs.
SELECT 'rate ' || l.key AS held FROM flow_limits l
WHERE l.rate <= (SELECT count(*) FROM flow_starts s WHERE s.key = l.key AND s.at > :now - l.period)
  AND EXISTS (SELECT 1 FROM jobs j
              WHERE j.state = 'pending' AND j.run_at <= :now
                AND (l.key = 'queue:' || j.queue
                     OR (j.rate_limit IS NOT NULL AND l.key = 'job:' || j.name)
                     OR (j.group_rate IS NOT NULL AND l.key = 'group:' || j.group_key)))
UNION ALL
SELECT 'group_limit ' || h.group_key AS held
FROM (SELECT group_key, count(*) AS n FROM jobs WHERE state = 'running' AND group_key IS NOT NULL
      GROUP BY group_key) h
WHERE EXISTS (SELECT 1 FROM jobs j
              WHERE j.group_key = h.group_key AND j.state = 'pending' AND j.run_at <= :now
                AND j.group_limit <= h.n)
ORDER BY held

-- job_flow --
-- What decides when one job may start, for saying why it waits.
SELECT state, name, queue, group_key, group_limit, rate_limit, group_rate FROM jobs WHERE id = :id

-- job_debounce --
-- A debounced enqueue finding its key pending: the new args, run_at moved to `run_at` but
-- never past debounce_until. Returns nothing when the key's job is not pending.
UPDATE jobs SET args = :args,
       run_at = min(:run_at, coalesce(debounce_until, :run_at))
WHERE key = :key AND state = 'pending'
RETURNING id

-- job_take --
-- Moves the chosen jobs to running for one owner; starts a new attempt. Those in :started go to
-- a child at once; the others wait in the supervisor's memory (started_at NULL: reserved). A row with no attempt
-- left (attempts not below max_attempts, which a pending job never has) gets attempt 0, which
-- the claim refuses: the increment can't overflow the column and fail the whole claim.
UPDATE jobs
SET state = 'running', owner = :owner, lease_until = :lease_until,
    attempts = CASE WHEN attempts < max_attempts THEN attempts + 1 ELSE 0 END,
    claimed_at = :now, cancel_requested = 0,
    started_at = CASE WHEN id IN (SELECT value FROM json_each(:started)) THEN :now END
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending'
RETURNING id, attempts, name, queue, args, max_attempts, timeout, max_memory, backoff,
          deadline_at, serial_key, run_at, snoozes, max_snoozes, headers,
          EXISTS (SELECT 1 FROM job_deps d WHERE d.job_id = jobs.id) AS has_deps,
          (SELECT json_group_object(s.name, json(s.value))
           FROM job_steps s
           WHERE s.job_id = jobs.id
             AND CASE WHEN typeof(s.name) = 'text' AND typeof(s.value) = 'text'
                      THEN json_valid(s.value) ELSE 0 END) AS steps

-- job_renew_leases --
-- Extends every lease an owner holds, in one statement, except those of the jobs it released
-- (their leases run out and the rescue takes them).
UPDATE jobs SET lease_until = :lease_until
WHERE state = 'running' AND owner = :owner
  AND id NOT IN (SELECT value FROM json_each(:released))
RETURNING id, attempts, cancel_requested

-- job_cancel_requested --
-- Running jobs of an owner that were asked to cancel.
SELECT id FROM jobs WHERE state = 'running' AND owner = :owner AND cancel_requested = 1

-- job_record_set --
-- Records attempts' outcomes in one statement, each fenced by attempt and (unless '') owner;
-- refund gives the attempt back. :rows is a JSON array of each outcome's values (now and
-- owner are parameters of their own).
-- A cancel requested while it ran wins over a retry or a hand-back: the job
-- ends cancelled instead of running again. The last progress is kept, except
-- on a job going back to pending: its next attempt starts with none (and no pid). Returns
-- the ids recorded.
UPDATE jobs
SET state = CASE WHEN jobs.cancel_requested = 1 AND r.state = 'pending' THEN 'cancelled'
                 ELSE r.state END,
    result = r.result,
    error = CASE WHEN jobs.cancel_requested = 1 AND r.state = 'pending'
                 THEN 'cancelled while running' ELSE r.error END,
    run_at = coalesce(r.run_at, jobs.run_at),
    started_at = coalesce(r.started_at, jobs.started_at),
    finished_at = CASE WHEN r.state IN ('done', 'failed', 'cancelled')
                         OR (jobs.cancel_requested = 1 AND r.state = 'pending') THEN :now END,
    attempts = jobs.attempts - r.refund, snoozes = jobs.snoozes + r.snooze,
    progress = CASE WHEN r.state = 'pending' AND jobs.cancel_requested = 0 THEN NULL
                    ELSE coalesce(r.progress, jobs.progress) END,
    fraction = CASE WHEN r.state = 'pending' AND jobs.cancel_requested = 0 THEN NULL
                    ELSE coalesce(r.fraction, jobs.fraction) END,
    pid = NULL,
    owner = NULL, lease_until = NULL, cancel_requested = 0
FROM (SELECT value ->> '$.id' AS id, value ->> '$.attempt' AS attempt,
             value ->> '$.state' AS state, value ->> '$.result' AS result,
             value ->> '$.error' AS error, value ->> '$.run_at' AS run_at,
             value ->> '$.refund' AS refund, value ->> '$.snooze' AS snooze,
             value ->> '$.progress' AS progress, value ->> '$.fraction' AS fraction,
             value ->> '$.started_at' AS started_at
      FROM json_each(:rows)) AS r
WHERE jobs.id = r.id AND jobs.attempts = r.attempt AND jobs.state = 'running'
  AND (:owner = '' OR jobs.owner = :owner)
RETURNING jobs.id

-- job_rules_wanted --
-- Of the given jobs, those whose end the record rules act on: a batch's member, or a job
-- others depend on (SQLite's write transactions never interleave: no edge can come between).
SELECT id FROM jobs j
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (batch_id IS NOT NULL OR EXISTS (SELECT 1 FROM job_deps e WHERE e.depends_on = j.id))

-- job_set_progress --
-- Progress of a running attempt (fenced).
UPDATE jobs SET progress = coalesce(:text, progress), fraction = coalesce(:fraction, fraction)
WHERE id = :id AND attempts = :attempt AND state = 'running'

-- job_save_step --
-- Saves one durable step's JSON result as its own row (fenced: nothing is written when the
-- attempt is no longer the job's running one).
INSERT INTO job_steps (job_id, name, value)
SELECT id, :name, json(:value) FROM jobs
WHERE id = :id AND attempts = :attempt AND state = 'running'
ON CONFLICT (job_id, name) DO UPDATE SET value = excluded.value

-- job_cancel_pending --
-- A pending or blocked job is cancelled at once.
UPDATE jobs SET state = 'cancelled', finished_at = :now
WHERE id = :id AND state IN ('pending', 'blocked')

-- job_cancel_running --
-- A running job is flagged; its supervisor kills the child and records the cancel.
UPDATE jobs SET cancel_requested = 1 WHERE id = :id AND state = 'running'

-- job_state --
-- One job's state.
SELECT state FROM jobs WHERE id = :id

-- job_retry --
-- A failed or cancelled job runs again with its attempts reset (durable steps kept).
UPDATE jobs
SET state = 'pending', attempts = 0, error = NULL, result = NULL, run_at = :now,
    finished_at = NULL, started_at = NULL, progress = NULL, fraction = NULL, pid = NULL,
    failure_handled = 0
WHERE id = :id AND state IN ('failed', 'cancelled')

-- job_rescue_expired --
-- Running jobs whose lease passed go back to pending, or end if cancelled or out of attempts.
UPDATE jobs
SET state = CASE WHEN cancel_requested = 1 THEN 'cancelled'
                 WHEN attempts >= max_attempts THEN 'failed'
                 ELSE 'pending' END,
    error = 'attempt ' || attempts || ' lost its lease (its supervisor stopped renewing it)',
    finished_at = CASE WHEN cancel_requested = 1 OR attempts >= max_attempts THEN :now END,
    progress = CASE WHEN cancel_requested = 1 OR attempts >= max_attempts THEN progress END,
    fraction = CASE WHEN cancel_requested = 1 OR attempts >= max_attempts THEN fraction END,
    pid = NULL,
    run_at = :now, owner = NULL, lease_until = NULL, cancel_requested = 0
WHERE state = 'running'
  AND (lease_until < :now OR lease_until IS NULL OR typeof(lease_until) NOT IN ('real', 'integer'))
RETURNING id

-- job_owners_running --
-- Owners of running jobs whose owner string starts with a host's prefix.
SELECT DISTINCT owner FROM jobs
WHERE state = 'running' AND substr(owner, 1, length(:prefix)) = :prefix

-- job_expire_owner --
-- Brings forward the lease of every job an owner holds (it is gone), so
-- that the next rescue takes them.
UPDATE jobs SET lease_until = :until
WHERE state = 'running' AND owner = :owner AND lease_until > :until

-- job_fail_past_deadline --
-- Pending jobs past their deadline fail instead of starting.
UPDATE jobs SET state = 'failed', error = 'passed its deadline', finished_at = :now
WHERE state = 'pending' AND deadline_at IS NOT NULL AND deadline_at <= :now
RETURNING id

-- job_prune --
-- Deletes one bounded batch of finished jobs; returns their ids (their attempts go next).
-- Members of a batch go with their batch.
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs
    WHERE state IN (SELECT value FROM json_each(:states)) AND finished_at < :before
      AND batch_id IS NULL
    LIMIT :limit)
RETURNING id

-- queue_set_limit --
-- Sets (or clears, with NULL) a queue's cluster-wide concurrency, and who did it when.
INSERT INTO queues (name, concurrency, limit_by, limit_at) VALUES (:queue, :limit, :by, :now)
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, limit_by = excluded.limit_by, limit_at = excluded.limit_at

-- queue_set_paused --
-- Pauses or resumes claims from a queue, cluster-wide.
INSERT INTO queues (name, paused) VALUES (:queue, :paused)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused

-- queue_counts --
-- Jobs per queue and state, and the earliest run_at already due of each (a pending job
-- waits from its run_at; one delayed into the future is not waiting yet).
SELECT queue, CASE WHEN state = 'running' AND started_at IS NULL THEN 'reserved' ELSE state END
       AS state, count(*) AS n, min(CASE WHEN run_at <= :now THEN run_at END) AS oldest
FROM jobs GROUP BY 1, 2

-- schema_table_create --
-- The table that records applied migrations.
CREATE TABLE IF NOT EXISTS procqueue_schema (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)

-- job_failures_unhandled --
-- Jobs that gave up and whose on_failure handler was not enqueued yet.
SELECT id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
       fraction, key, serial_key, tags, run_at, created_at, started_at, finished_at, deadline_at,
       pid, owner, on_failure
FROM jobs
WHERE state = 'failed' AND on_failure IS NOT NULL AND failure_handled = 0
ORDER BY id
LIMIT :limit

-- job_mark_failure_handled --
-- Marks a job's on_failure handler as enqueued.
UPDATE jobs SET failure_handled = 1 WHERE id = :id AND state = 'failed' AND failure_handled = 0

-- chore_claim --
-- Takes a periodic chore if it has not run for `every` seconds (one row changes for one taker).
INSERT INTO chores (name, last_run) VALUES (:name, :now)
ON CONFLICT (name) DO UPDATE SET last_run = excluded.last_run
WHERE chores.last_run <= :now - :every

-- job_set_pid --
-- Records which child process runs an attempt and when it started it (fenced).
UPDATE jobs SET pid = :pid, started_at = coalesce(:started_at, started_at)
WHERE id = :id AND attempts = :attempt AND state = 'running'

-- job_fail_undecodable --
-- Fails a job just taken whose row does not decode, in the claim's transaction: it never runs.
UPDATE jobs
SET state = 'failed', error = :error, finished_at = :now,
    owner = NULL, lease_until = NULL, cancel_requested = 0
WHERE id = :id AND state = 'running'

-- sqlite_wal --
-- Write-ahead logging: readers never block the writer, nor the writer readers.
PRAGMA journal_mode=WAL

-- sqlite_tuning --
-- Per-connection settings, run as one script (see SqliteDialect).
PRAGMA synchronous=NORMAL;
PRAGMA wal_autocheckpoint=10000;
PRAGMA journal_size_limit=67108864

-- sqlite_begin --
-- Every transaction takes the file's write lock first (waiting up to the busy timeout).
BEGIN IMMEDIATE

-- sqlite_commit --
-- Ends a transaction.
COMMIT

-- sqlite_rollback --
-- Abandons a transaction.
ROLLBACK

-- ---- Operations: attempt history, supervisors, managed limits, bulk actions ----

-- attempt_record_set --
-- Attempts' history rows in one statement (:rows: a JSON array of each outcome's values),
-- written with their outcomes in the same transaction and fenced the same way (nothing is
-- written for an attempt no longer running). A cancel that wins over a retry or a hand-back
-- is recorded as the cancel it becomes.
INSERT INTO job_attempts (job_id, attempt, owner, child_pid, claimed_at, started_at, ended_at,
                          outcome, exit_reason, error, peak_memory)
SELECT jobs.id, jobs.attempts, jobs.owner, coalesce(r.child_pid, jobs.pid), jobs.claimed_at,
       r.started_at, :now,
       CASE WHEN jobs.cancel_requested = 1 AND r.state = 'pending' THEN 'cancelled'
            ELSE r.outcome END,
       r.exit_reason, r.error, r.peak_memory
FROM (SELECT value ->> '$.id' AS id, value ->> '$.attempt' AS attempt,
             value ->> '$.state' AS state, value ->> '$.outcome' AS outcome,
             value ->> '$.child_pid' AS child_pid, value ->> '$.started_at' AS started_at,
             value ->> '$.exit_reason' AS exit_reason, value ->> '$.error' AS error,
             value ->> '$.peak_memory' AS peak_memory
      FROM json_each(:rows)) AS r
JOIN jobs ON jobs.id = r.id
WHERE jobs.attempts = r.attempt AND jobs.state = 'running' AND (:owner = '' OR jobs.owner = :owner)
ORDER BY jobs.id

-- attempt_record_lost --
-- History rows of the running jobs whose lease passed, written just before job_rescue_expired
-- in its transaction (which holds the claim lock, so two rescuers never both write them).
INSERT INTO job_attempts (job_id, attempt, owner, child_pid, claimed_at, started_at, ended_at,
                          outcome, exit_reason, error, peak_memory)
SELECT id, attempts, owner, pid, claimed_at, started_at, :now, 'lost', NULL,
       'its lease ran out: its supervisor stopped renewing it', NULL
FROM jobs WHERE state = 'running'
  AND (lease_until < :now OR lease_until IS NULL OR typeof(lease_until) NOT IN ('real', 'integer'))

-- attempt_list --
-- Every recorded attempt of one job, oldest first.
SELECT attempt, owner, child_pid, claimed_at, started_at, ended_at, outcome, exit_reason, error,
       peak_memory
FROM job_attempts WHERE job_id = :id ORDER BY seq

-- attempt_prune --
-- The history of pruned jobs.
DELETE FROM job_attempts WHERE job_id IN (SELECT value FROM json_each(:ids))

-- step_prune --
-- The durable steps of deleted jobs.
DELETE FROM job_steps WHERE job_id IN (SELECT value FROM json_each(:ids))

-- supervisor_beat --
-- A supervisor says it is alive, what it runs and how busy it is.
INSERT INTO supervisors (owner, host, pid, version, spec, queues, limits, workers, busy,
                         beat_every, started_at, last_seen)
VALUES (:owner, :host, :pid, :version, :spec, :queues, :limits, :workers, :busy,
        :beat_every, :started_at, :now)
ON CONFLICT (owner) DO UPDATE
SET busy = excluded.busy, workers = excluded.workers, beat_every = excluded.beat_every,
    last_seen = excluded.last_seen

-- supervisor_forget --
-- Rows of supervisors silent since `before` (gone without saying so).
DELETE FROM supervisors WHERE last_seen < :before

-- supervisor_remove --
-- A supervisor that stopped cleanly removes its row.
DELETE FROM supervisors WHERE owner = :owner

-- supervisor_list --
-- Every supervisor row, oldest first.
SELECT owner, host, pid, version, spec, queues, limits, workers, busy, beat_every, started_at,
       last_seen
FROM supervisors ORDER BY started_at, owner

-- queue_init_limit --
-- A supervisor's --queue NAME=LIMIT, applied only to a queue whose limit nobody set yet:
-- an operator's or an earlier supervisor's setting is never overwritten (the caller compares).
INSERT INTO queues (name, concurrency, limit_by, limit_at) VALUES (:queue, :limit, :by, :now)
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, limit_by = excluded.limit_by, limit_at = excluded.limit_at
WHERE queues.concurrency IS NULL AND queues.limit_by IS NULL

-- job_count_where --
-- How many jobs in `states` match the filters (NULL matches all; since: created at or after).
SELECT count(*) AS n FROM jobs
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:queue IS NULL OR queue = :queue)
  AND (:name IS NULL OR name = :name)
  AND (:since IS NULL OR created_at >= :since)

-- job_retry_where --
-- job_retry for every failed or cancelled job matching the filters.
UPDATE jobs
SET state = 'pending', attempts = 0, error = NULL, result = NULL, run_at = :now,
    finished_at = NULL, started_at = NULL, progress = NULL, fraction = NULL, pid = NULL,
    failure_handled = 0
WHERE state IN ('failed', 'cancelled') AND state IN (SELECT value FROM json_each(:states))
  AND (:queue IS NULL OR queue = :queue)
  AND (:name IS NULL OR name = :name)
  AND (:since IS NULL OR created_at >= :since)
RETURNING id

-- job_cancel_pending_where --
-- job_cancel_pending for every pending or blocked job matching the filters.
UPDATE jobs SET state = 'cancelled', finished_at = :now
WHERE state IN ('pending', 'blocked') AND state IN (SELECT value FROM json_each(:states))
  AND (:queue IS NULL OR queue = :queue)
  AND (:name IS NULL OR name = :name)
  AND (:since IS NULL OR created_at >= :since)
RETURNING id

-- job_cancel_running_where --
-- job_cancel_running for every running job matching the filters.
UPDATE jobs SET cancel_requested = 1
WHERE state = 'running' AND cancel_requested = 0 AND state IN (SELECT value FROM json_each(:states))
  AND (:queue IS NULL OR queue = :queue)
  AND (:name IS NULL OR name = :name)
  AND (:since IS NULL OR created_at >= :since)
-- Batches. A batch completes in the transaction that makes its last
-- member terminal: that transaction first locks the batch's row (batch_lock*;
-- on PostgreSQL, FOR UPDATE) and only then, in a statement of its own and so
-- with a fresh snapshot, asks whether any member is still open (batch_complete*).
-- Of two transactions ending a batch's last two members, the second to take the
-- lock sees the first's member committed: exactly one of them completes it.

-- batch_insert --
-- Creates an open batch.
INSERT INTO batches (name, meta, complete_job, success_job, created_at)
VALUES (:name, :meta, :complete_job, :success_job, :now)
RETURNING id

-- batch_lock --
-- Locks one batch's row until the transaction ends; its state.
SELECT id, sealed_at, completed_at FROM batches WHERE id = :id

-- batch_lock_of_jobs --
-- Locks, in id order, the rows of the batches of the given jobs that are terminal.
SELECT id FROM batches
WHERE id IN (SELECT batch_id FROM jobs
             WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('done', 'failed', 'cancelled'))

-- batch_complete_of_jobs --
-- Completes the sealed batches of the given jobs that have members and no open member
-- (run after batch_lock_of_jobs); returns the ids completed now.
UPDATE batches AS b SET completed_at = :now, completions = b.completions + 1
WHERE b.id IN (SELECT batch_id FROM jobs
               WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('done', 'failed', 'cancelled'))
  AND b.sealed_at IS NOT NULL AND b.completed_at IS NULL
  AND EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id)
  AND NOT EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id AND m.state IN ('blocked', 'pending', 'running'))
RETURNING id

-- batch_complete --
-- Completes one sealed batch with members and no open member (run after batch_lock).
UPDATE batches AS b SET completed_at = :now, completions = b.completions + 1
WHERE b.id = :id
  AND b.sealed_at IS NOT NULL AND b.completed_at IS NULL
  AND EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id)
  AND NOT EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id AND m.state IN ('blocked', 'pending', 'running'))
RETURNING id

-- batch_seal --
-- Seals a batch: no member joins it any more, and it may complete.
UPDATE batches SET sealed_at = coalesce(sealed_at, :now) WHERE id = :id

-- batch_get --
-- One batch with its members counted per state.
SELECT b.id, b.name, b.meta, b.complete_job, b.success_job, b.created_at, b.sealed_at,
       b.cancelled_at, b.completed_at, b.completions,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'blocked') AS blocked,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'pending') AS pending,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'running') AS running,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'done') AS done,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'failed') AS failed,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'cancelled') AS cancelled,
       (SELECT min(j.started_at) FROM jobs j WHERE j.batch_id = b.id) AS started_at
FROM batches b WHERE b.id = :id

-- batch_list --
-- Batches, newest first, filtered by name and by state (NULL matches all).
-- Its columns repeat batch_get's: each named query is one static statement, never built.
SELECT b.id, b.name, b.meta, b.complete_job, b.success_job, b.created_at, b.sealed_at,
       b.cancelled_at, b.completed_at, b.completions,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'blocked') AS blocked,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'pending') AS pending,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'running') AS running,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'done') AS done,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'failed') AS failed,
       (SELECT count(*) FROM jobs j WHERE j.batch_id = b.id AND j.state = 'cancelled') AS cancelled,
       (SELECT min(j.started_at) FROM jobs j WHERE j.batch_id = b.id) AS started_at
FROM batches b
WHERE (:name IS NULL OR b.name = :name)
  AND (:state IS NULL
       OR (:state = 'open' AND b.sealed_at IS NULL)
       OR (:state = 'running' AND b.sealed_at IS NOT NULL AND b.completed_at IS NULL)
       OR (:state = 'complete' AND b.completed_at IS NOT NULL))
ORDER BY b.id DESC
LIMIT :limit

-- batch_members --
-- One page of a batch's members in id order, after `after`, optionally in one state.
SELECT id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
       fraction, key, serial_key, tags, run_at, created_at, started_at, finished_at, deadline_at,
       pid, owner
FROM jobs
WHERE batch_id = :id AND id > :after
  AND (:state IS NULL OR state = :state)
ORDER BY id
LIMIT :limit

-- batch_cancel_pending --
-- Cancels a batch's pending and blocked members at once.
UPDATE jobs SET state = 'cancelled', finished_at = :now
WHERE batch_id = :id AND state IN ('pending', 'blocked')
RETURNING id

-- batch_cancel_running --
-- Flags a batch's running members (in id order); their supervisors kill them.
UPDATE jobs SET cancel_requested = 1
WHERE id IN (SELECT id FROM jobs WHERE batch_id = :id AND state = 'running')

-- batch_mark_cancelled --
-- Records a batch's cancel; a cancelled batch is sealed too (nothing joins it any more).
UPDATE batches SET cancelled_at = coalesce(cancelled_at, :now),
                   sealed_at = coalesce(sealed_at, :now)
WHERE id = :id

-- batch_retry_failed --
-- A batch's failed members run again with their attempts reset.
UPDATE jobs
SET state = 'pending', attempts = 0, error = NULL, result = NULL, run_at = :now,
    finished_at = NULL, started_at = NULL, failure_handled = 0
WHERE batch_id = :id AND state = 'failed'
RETURNING id

-- batch_lock_of_reopened --
-- The batches of the given jobs whatever their states (SQLite's write transactions never
-- interleave: reading them is all the PostgreSQL dialect's lock amounts to here).
SELECT id FROM batches
WHERE id IN (SELECT batch_id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)))

-- batch_reopen_of_jobs --
-- The completed batches of jobs that run again are running again (their next completion counts anew).
UPDATE batches SET completed_at = NULL, cancelled_at = NULL
WHERE id IN (SELECT batch_id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)))
  AND completed_at IS NOT NULL

-- batch_prunable --
-- Completed batches finished before `before` with no failed member (failed jobs stay until
-- retried or deleted by hand), oldest first.
SELECT id FROM batches b
WHERE b.completed_at < :before
  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.batch_id = b.id AND j.state = 'failed')
ORDER BY b.id LIMIT :limit

-- batch_delete_members --
-- Deletes one bounded batch of a batch's finished members; returns their ids (their attempts
-- and steps go next).
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs WHERE batch_id = :id AND state IN ('done', 'failed', 'cancelled')
    LIMIT :limit)
RETURNING id

-- batch_delete --
-- Deletes a completed batch whose members are all gone.
DELETE FROM batches
WHERE id = :id AND completed_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM jobs WHERE batch_id = :id)

-- batch_member_counts --
-- Members of batches not yet complete, per batch name and state (the metrics' gauges).
SELECT b.name, j.state, count(*) AS n
FROM batches b JOIN jobs j ON j.batch_id = b.id
WHERE b.completed_at IS NULL
GROUP BY b.name, j.state

-- batch_finished_open --
-- Sealed batches with members, none open, not complete: none, unless a path that ends jobs
-- did not complete their batch (the maintenance sweep completes them: a safety net).
SELECT id FROM batches b
WHERE b.sealed_at IS NOT NULL AND b.completed_at IS NULL
  AND EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id)
  AND NOT EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id AND m.state IN ('blocked', 'pending', 'running'))
ORDER BY b.id
LIMIT :limit

-- job_finished_per_minute --
-- Done and failed jobs per UTC minute since a time, with how many of them ended after a
-- second time (the rate now); counted in the database, so it holds whatever the volume.
SELECT CAST(finished_at / 60 AS INTEGER) AS minute, state, count(*) AS n,
       sum(CASE WHEN finished_at > :recent THEN 1 ELSE 0 END) AS recent
FROM jobs WHERE state IN ('done', 'failed') AND finished_at >= :since
GROUP BY 1, 2

-- ---- Workflows: dependencies between jobs (see store/_deps.py) ----
-- A job's edges (job_deps) name the jobs it depends on; an edge is resolved once its
-- dependency is terminal. Every statement here is idempotent: run again with the same
-- ids, it changes nothing more.

-- dep_lock_parents --
-- The jobs named as dependencies by an enqueue, locked until it commits (so none of them
-- ends unseen between this read and the new edges).
SELECT id, name, state FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY id

-- dep_insert --
-- One edge: job_id waits for depends_on (resolved when that one is terminal already).
INSERT INTO job_deps (job_id, depends_on, resolved) VALUES (:job_id, :depends_on, :resolved)
ON CONFLICT (job_id, depends_on) DO NOTHING
RETURNING job_id

-- dep_lock_dependents --
-- The blocked dependents of the given jobs, before they are decided (SQLite's write transactions
-- never interleave: there is no lock to take, nor an order to keep, as PostgreSQL's dialect does
-- for the blocked jobs downstream of a failure too).
SELECT id FROM jobs
WHERE state = 'blocked' AND id IN (SELECT job_id FROM job_deps
                                   WHERE depends_on IN (SELECT value FROM json_each(:ids)))
ORDER BY id

-- dep_cancel_dependents --
-- Blocked dependents (without allow_failure) of the given jobs that ended failed or
-- cancelled are cancelled, naming the lowest such dependency (run before dep_resolve).
UPDATE jobs
SET state = 'cancelled', finished_at = :now, blocked_by = f.parent,
    error = 'dependency ' || f.parent || ' (' || p.name || ') '
            || CASE WHEN p.state = 'failed' THEN 'failed' ELSE 'was cancelled' END
FROM (SELECT e.job_id, min(e.depends_on) AS parent
      FROM job_deps e JOIN jobs q ON q.id = e.depends_on
      WHERE e.depends_on IN (SELECT value FROM json_each(:ids)) AND e.resolved = 0
        AND q.state IN ('failed', 'cancelled')
      GROUP BY e.job_id) AS f
JOIN jobs AS p ON p.id = f.parent
WHERE jobs.id = f.job_id AND jobs.state = 'blocked' AND jobs.allow_failure = 0
RETURNING id

-- dep_resolve --
-- Resolves the edges of the given jobs that are terminal.
UPDATE job_deps SET resolved = 1
WHERE resolved = 0
  AND depends_on IN (SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))
                     AND state IN ('done', 'failed', 'cancelled'))

-- dep_promote --
-- Blocked dependents of the given jobs with no unresolved edge left become pending.
UPDATE jobs SET state = 'pending', run_at = max(run_at, :now)
WHERE state = 'blocked'
  AND id IN (SELECT job_id FROM job_deps WHERE depends_on IN (SELECT value FROM json_each(:ids)))
  AND NOT EXISTS (SELECT 1 FROM job_deps e WHERE e.job_id = jobs.id AND e.resolved = 0)
RETURNING id

-- dep_cancel_failed_of --
-- The given jobs (just inserted or made pending again, without allow_failure) that depend
-- on a failed or cancelled job are cancelled, naming the lowest such dependency.
UPDATE jobs
SET state = 'cancelled', finished_at = :now, blocked_by = f.parent,
    error = 'dependency ' || f.parent || ' (' || p.name || ') '
            || CASE WHEN p.state = 'failed' THEN 'failed' ELSE 'was cancelled' END
FROM (SELECT e.job_id, min(e.depends_on) AS parent
      FROM job_deps e JOIN jobs q ON q.id = e.depends_on
      WHERE e.job_id IN (SELECT value FROM json_each(:ids)) AND q.state IN ('failed', 'cancelled')
      GROUP BY e.job_id) AS f
JOIN jobs AS p ON p.id = f.parent
WHERE jobs.id = f.job_id AND jobs.state IN ('pending', 'blocked') AND jobs.allow_failure = 0
RETURNING id

-- dep_block_of --
-- The given pending jobs (just inserted or made pending again) with an unresolved edge
-- are blocked; none names a dependency that cancelled it any more.
UPDATE jobs
SET blocked_by = NULL,
    state = CASE WHEN EXISTS (SELECT 1 FROM job_deps e WHERE e.job_id = jobs.id AND e.resolved = 0)
                 THEN 'blocked' ELSE state END
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending'

-- dep_unresolve --
-- The edges of the given jobs that run again are unresolved again.
UPDATE job_deps SET resolved = 0
WHERE resolved = 1
  AND depends_on IN (SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))
                     AND state NOT IN ('done', 'failed', 'cancelled'))

-- dep_reblock_dependents --
-- Pending dependents of the given jobs that run again wait for them again (run after
-- dep_unresolve); running and finished ones are left as they are.
UPDATE jobs SET state = 'blocked'
WHERE state = 'pending'
  AND id IN (SELECT job_id FROM job_deps WHERE depends_on IN (SELECT value FROM json_each(:ids)))
  AND EXISTS (SELECT 1 FROM job_deps e WHERE e.job_id = jobs.id AND e.resolved = 0)

-- dep_reopen_dependents --
-- Jobs cancelled because one of the given jobs failed or was cancelled wait for it again.
UPDATE jobs SET state = 'blocked', error = NULL, finished_at = NULL, blocked_by = NULL
WHERE blocked_by IN (SELECT value FROM json_each(:ids)) AND state = 'cancelled'
RETURNING id

-- dep_prune --
-- The edges of pruned jobs, either way.
DELETE FROM job_deps
WHERE job_id IN (SELECT value FROM json_each(:ids))
   OR depends_on IN (SELECT value FROM json_each(:ids))

-- dep_list --
-- The edges of the given jobs, with their dependencies' names and states.
SELECT e.job_id, e.depends_on, p.name, p.state
FROM job_deps e LEFT JOIN jobs p ON p.id = e.depends_on
WHERE e.job_id IN (SELECT value FROM json_each(:ids))
ORDER BY e.job_id, e.depends_on

-- dep_results_of --
-- The results of the done dependencies of the given jobs.
SELECT e.job_id, p.id, p.result FROM job_deps e JOIN jobs p ON p.id = e.depends_on
WHERE e.job_id IN (SELECT value FROM json_each(:ids)) AND p.state = 'done'
ORDER BY e.job_id, p.id
