-- The PostgreSQL dialect of every named statement (see procqueue/store/_queries.py).
-- sql/sqlite/queries.sql defines the same names with the same parameters: each
-- file holds its dialect's whole statement, so statements where the dialects agree
-- read the same in both (job_candidates, the longest, shares most of its lines).

-- schema_table_exists --
-- Whether the schema (the search_path) has procqueue's migrations table; creates nothing.
SELECT EXISTS (
    SELECT 1 FROM information_schema.tables
    WHERE table_schema = ANY (current_schemas(false)) AND table_name = 'procqueue_schema'
) AS present

-- schema_version_get --
-- The applied schema version (0 when none).
SELECT coalesce(max(version), 0) AS version FROM procqueue_schema

-- schema_version_set --
-- Records that a migration was applied.
INSERT INTO procqueue_schema (version, applied_at) VALUES (%(version)s, %(now)s)

-- job_insert --
-- Inserts one job; a duplicate key inserts nothing and returns no row.
INSERT INTO jobs (name, queue, state, priority, max_attempts, args, key, serial_key, tags,
                  timeout, max_memory, backoff, on_failure, run_at, created_at, deadline_at,
                  batch_id, allow_failure, max_snoozes, headers,
                  group_key, group_limit, rate_limit, group_rate, debounce_until)
VALUES (%(name)s, %(queue)s, 'pending', %(priority)s, %(max_attempts)s, %(args)s::json,
        %(key)s::text, %(serial_key)s::text, %(tags)s::jsonb, %(timeout)s::float8,
        %(max_memory)s::integer, %(backoff)s::jsonb, %(on_failure)s::text, %(run_at)s::float8,
        %(now)s, %(deadline_at)s::float8, %(batch_id)s::bigint, %(allow_failure)s::boolean,
        %(max_snoozes)s::integer, %(headers)s::json,
        %(group)s::text, %(group_limit)s::integer, %(rate_limit)s::text, %(group_rate)s::text,
        %(debounce_until)s::float8)
ON CONFLICT (key) DO NOTHING
RETURNING id

-- job_id_by_key --
-- The job holding an idempotency key.
SELECT id FROM jobs WHERE key = %(key)s

-- job_get --
-- One job's public record.
SELECT id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
       fraction, key, serial_key, tags, run_at, created_at, started_at, finished_at, deadline_at,
       pid, owner
FROM jobs WHERE id = %(id)s

-- job_list --
-- Jobs matching the given filters (NULL matches all), newest first.
SELECT id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
       fraction, key, serial_key, tags, run_at, created_at, started_at, finished_at, deadline_at,
       pid, owner
FROM jobs
WHERE (%(state)s::text IS NULL
       OR state = %(state)s::text AND (%(state)s::text <> 'running' OR started_at IS NOT NULL)
       OR %(state)s::text = 'reserved' AND state = 'running' AND started_at IS NULL)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
ORDER BY id DESC
LIMIT %(limit)s

-- queue_limits --
-- Limits and paused flags of every configured queue.
SELECT name, concurrency, paused, limit_by, limit_at FROM queues

-- _claim_spent --
-- The rate limits spent in their window now (a part of job_candidates and job_group_heads).
WITH spent AS MATERIALIZED (
    SELECT l.key FROM flow_limits l
    WHERE l.rate <= (SELECT count(*) FROM flow_starts s
                     WHERE s.key = l.key AND s.at > %(now)s::float8 - l.period))

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
  AND (deadline_at IS NULL OR deadline_at > %(now)s::float8)
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
  AND queue NOT IN (SELECT name FROM queues WHERE paused)
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
-- Walks the jobs_claim partial index; skips rows another transaction holds.
<<_claim_spent>>
<<_claim_columns>>
FROM jobs
WHERE state = 'pending' AND run_at <= %(now)s::float8
<<_claim_filters>>
ORDER BY priority DESC, run_at, id
LIMIT %(limit)s
FOR UPDATE OF jobs SKIP LOCKED

-- job_group_heads --
-- job_candidates, among the first 4 due jobs of each group in serving order (least recently
-- served first): the jobs that let a claim rotate across groups whatever their backlogs.
-- Probes each group's jobs_group_claim range (the groups drive the plan, whatever the
-- statistics say); skips rows another transaction holds.
<<_claim_spent>>
<<_claim_columns>>
FROM (SELECT group_key AS served_key FROM flow_groups ORDER BY served_at LIMIT %(limit)s) f
CROSS JOIN LATERAL (
    SELECT * FROM jobs x
    WHERE x.group_key = f.served_key AND x.group_key IS NOT NULL
      AND x.state = 'pending' AND x.run_at <= %(now)s::float8
    ORDER BY x.group_key, x.priority DESC, x.run_at, x.id LIMIT 4
    FOR UPDATE SKIP LOCKED) AS jobs
WHERE true
<<_claim_filters>>

-- flow_rooms --
-- How many more starts each of `keys` allows in its window now (keys without a limit: none).
SELECT l.key, l.rate - (SELECT count(*) FROM flow_starts s
                        WHERE s.key = l.key AND s.at > %(now)s::float8 - l.period) AS room
FROM flow_limits l WHERE l.key = ANY(%(keys)s::text[])

-- flow_start_add --
-- One start counted against each of `keys` (a key twice: two starts), at `now`.
INSERT INTO flow_starts (key, at) SELECT k, %(now)s::float8 FROM unnest(%(keys)s::text[]) AS k

-- flow_starts_trim --
-- Forgets the starts of `keys` that left their window (or whose limit is gone) more than
-- `kept` seconds ago: a claim stamped before another that committed first still counts them.
DELETE FROM flow_starts s
WHERE s.key = ANY(%(keys)s::text[])
  AND s.at <= %(now)s::float8 - %(kept)s::float8
             - coalesce((SELECT l.period FROM flow_limits l WHERE l.key = s.key), 0)

-- flow_group_served --
-- Records that a claim served `groups`, in that order, at base + 1e-6, base + 2e-6, ... (the
-- rotation puts them last).
INSERT INTO flow_groups (group_key, served_at)
SELECT g, %(base)s::float8 + n * 1e-6 FROM unnest(%(groups)s::text[]) WITH ORDINALITY AS t(g, n)
ON CONFLICT (group_key) DO UPDATE SET served_at = excluded.served_at

-- flow_group_add --
-- Groups that jobs were enqueued in join the rotation (as never served, when new).
INSERT INTO flow_groups (group_key) SELECT DISTINCT g FROM unnest(%(groups)s::text[]) AS g
ON CONFLICT (group_key) DO NOTHING

-- flow_groups_prune --
-- Groups served before `before` that hold no job waiting, held or blocked leave the rotation.
DELETE FROM flow_groups f
WHERE f.served_at < %(before)s::float8
  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.group_key = f.group_key
                  AND j.state IN ('pending', 'running', 'blocked'))

-- flow_limit_set --
-- Sets a key's rate (the latest enqueue or operator wins; an enqueue's unchanged rate writes
-- nothing).
INSERT INTO flow_limits (key, rate, period, set_by, set_at)
VALUES (%(key)s, %(rate)s::integer, %(period)s::float8, %(by)s::text, %(now)s::float8)
ON CONFLICT (key) DO UPDATE
SET rate = excluded.rate, period = excluded.period, set_by = excluded.set_by,
    set_at = excluded.set_at
WHERE (flow_limits.rate, flow_limits.period) IS DISTINCT FROM (excluded.rate, excluded.period)
   OR excluded.set_by IS NOT NULL

-- flow_limit_of --
-- The rates `keys` hold now (keys without one: no row).
SELECT key, rate, period FROM flow_limits WHERE key = ANY(%(keys)s::text[])

-- flow_limit_clear --
-- Removes a key's rate.
DELETE FROM flow_limits WHERE key = %(key)s

-- flow_limit_list --
-- Every key's rate with the starts counted in its current window.
SELECT l.key, l.rate, l.period, l.set_by, l.set_at,
       (SELECT count(*) FROM flow_starts s
        WHERE s.key = l.key AND s.at > %(now)s::float8 - l.period) AS used
FROM flow_limits l ORDER BY l.key

-- flow_starts_of --
-- The starts of one key in its window now, oldest first.
SELECT s.at FROM flow_starts s JOIN flow_limits l ON l.key = s.key
WHERE s.key = %(key)s AND s.at > %(now)s::float8 - l.period ORDER BY s.at

-- flow_group_held --
-- How many jobs of a group are held (running or reserved).
SELECT count(*) AS n FROM jobs WHERE state = 'running' AND group_key = %(group)s

-- flow_held_back --
-- The rates spent and group limits reached now that hold back due pending work (for a claim
-- that came back short); the groups are found from their held jobs.
SELECT 'rate ' || l.key AS held FROM flow_limits l
WHERE l.rate <= (SELECT count(*) FROM flow_starts s WHERE s.key = l.key AND s.at > %(now)s::float8 - l.period)
  AND EXISTS (SELECT 1 FROM jobs j
              WHERE j.state = 'pending' AND j.run_at <= %(now)s::float8
                AND (l.key = 'queue:' || j.queue
                     OR (j.rate_limit IS NOT NULL AND l.key = 'job:' || j.name)
                     OR (j.group_rate IS NOT NULL AND l.key = 'group:' || j.group_key)))
UNION ALL
SELECT 'group_limit ' || h.group_key AS held
FROM (SELECT group_key, count(*) AS n FROM jobs WHERE state = 'running' AND group_key IS NOT NULL
      GROUP BY group_key) h
WHERE EXISTS (SELECT 1 FROM jobs j
              WHERE j.group_key = h.group_key AND j.state = 'pending' AND j.run_at <= %(now)s::float8
                AND j.group_limit <= h.n)
ORDER BY held

-- job_flow --
-- What decides when one job may start, for saying why it waits.
SELECT state, name, queue, group_key, group_limit, rate_limit, group_rate FROM jobs WHERE id = %(id)s

-- job_debounce --
-- A debounced enqueue finding its key pending: the new args, run_at moved to `run_at` but
-- never past debounce_until. Returns nothing when the key's job is not pending.
UPDATE jobs SET args = %(args)s::json,
       run_at = least(%(run_at)s::float8, coalesce(debounce_until, %(run_at)s::float8))
WHERE key = %(key)s AND state = 'pending'
RETURNING id

-- job_take --
-- Moves the chosen jobs to running for one owner; starts a new attempt. Those in started go to
-- a child at once; the others wait in the supervisor's memory (started_at NULL: reserved). A row with no attempt
-- left (attempts not below max_attempts, which a pending job never has) gets attempt 0, which
-- the claim refuses: the increment can't overflow the column and fail the whole claim.
-- Each row found by its key (a join on the ids: `id = ANY` lets a planner without statistics
-- walk all of jobs_claim, which holds id too).
UPDATE jobs
SET state = 'running', owner = %(owner)s,
    attempts = CASE WHEN attempts < max_attempts THEN attempts + 1 ELSE 0 END,
    lease_until = %(lease_until)s::float8, claimed_at = %(now)s::float8, cancel_requested = false,
    started_at = CASE WHEN jobs.id = ANY(%(started)s::bigint[]) THEN %(now)s::float8 END
FROM unnest(%(ids)s::bigint[]) AS taken(id)
WHERE jobs.id = taken.id AND state = 'pending'
RETURNING jobs.id, attempts, name, queue, args, max_attempts, timeout, max_memory, backoff,
          deadline_at, serial_key, run_at, snoozes, max_snoozes, headers,
          EXISTS (SELECT 1 FROM job_deps d WHERE d.job_id = jobs.id) AS has_deps,
          (SELECT coalesce(jsonb_object_agg(s.name, s.value), '{}'::jsonb)
           FROM job_steps s WHERE s.job_id = jobs.id) AS steps

-- job_renew_leases --
-- Extends every lease an owner holds, in one statement, except those of the jobs it released
-- (their leases run out and the rescue takes them).
UPDATE jobs SET lease_until = %(lease_until)s::float8
WHERE state = 'running' AND owner = %(owner)s
  AND NOT (id = ANY(%(released)s::bigint[]))
RETURNING id, attempts, cancel_requested

-- job_cancel_requested --
-- Running jobs of an owner that were asked to cancel.
SELECT id FROM jobs WHERE state = 'running' AND owner = %(owner)s AND cancel_requested

-- job_record_set --
-- Records attempts' outcomes in one statement, each fenced by attempt and (unless '') owner;
-- refund gives the attempt back. %(rows)s is a JSON array of each outcome's values (now and
-- owner are parameters of their own).
-- A cancel requested while it ran wins over a retry or a hand-back: the job
-- ends cancelled instead of running again. The last progress is kept, except
-- on a job going back to pending: its next attempt starts with none (and no pid). Their
-- rows are locked in id order first, so that two transactions recording the same rows cannot
-- deadlock. Returns the ids recorded.
WITH r AS (
    SELECT * FROM json_to_recordset(%(rows)s::json) AS r(
        id bigint, attempt integer, state text, result text, error text, run_at float8,
        refund boolean, snooze integer, progress text, fraction float8, started_at float8)
), locked AS (
    SELECT jobs.id FROM jobs WHERE jobs.id IN (SELECT id FROM r) ORDER BY jobs.id FOR UPDATE
)
UPDATE jobs
SET state = CASE WHEN jobs.cancel_requested AND r.state = 'pending' THEN 'cancelled'
                 ELSE r.state END,
    result = r.result::json,
    error = CASE WHEN jobs.cancel_requested AND r.state = 'pending'
                 THEN 'cancelled while running' ELSE r.error END,
    run_at = coalesce(r.run_at, jobs.run_at),
    started_at = coalesce(r.started_at, jobs.started_at),
    finished_at = CASE WHEN r.state IN ('done', 'failed', 'cancelled')
                         OR (jobs.cancel_requested AND r.state = 'pending')
                       THEN %(now)s::float8 END,
    attempts = jobs.attempts - r.refund::integer, snoozes = jobs.snoozes + r.snooze,
    progress = CASE WHEN r.state = 'pending' AND NOT jobs.cancel_requested THEN NULL
                    ELSE coalesce(r.progress, jobs.progress) END,
    fraction = CASE WHEN r.state = 'pending' AND NOT jobs.cancel_requested THEN NULL
                    ELSE coalesce(r.fraction, jobs.fraction) END,
    pid = NULL,
    owner = NULL, lease_until = NULL, cancel_requested = false
FROM r
WHERE jobs.id = r.id AND jobs.id IN (SELECT id FROM locked)
  AND jobs.attempts = r.attempt AND jobs.state = 'running'
  AND (%(owner)s::text = '' OR jobs.owner = %(owner)s::text)
RETURNING jobs.id

-- job_rules_wanted --
-- Of the given jobs, those whose end the record rules act on: a batch's member, or a job
-- others depend on. A statement of its own, after the outcomes' writes: its snapshot is
-- taken once they hold the jobs' row locks, so it sees every edge an enqueue committed
-- before (an enqueue adding one later locks the job first, so it waits for this
-- transaction and then finds the job ended).
SELECT id FROM jobs j
WHERE id = ANY(%(ids)s::bigint[])
  AND (batch_id IS NOT NULL OR EXISTS (SELECT 1 FROM job_deps e WHERE e.depends_on = j.id))

-- job_set_progress --
-- Progress of a running attempt (fenced).
UPDATE jobs
SET progress = coalesce(%(text)s::text, progress),
    fraction = coalesce(%(fraction)s::float8, fraction)
WHERE id = %(id)s AND attempts = %(attempt)s AND state = 'running'

-- job_save_step --
-- Saves one durable step's JSON result as its own row (fenced: the job's row is locked and
-- checked, so an attempt that lost its lease writes nothing).
WITH fence AS (
    SELECT id FROM jobs
    WHERE id = %(id)s AND attempts = %(attempt)s AND state = 'running'
    FOR SHARE)
INSERT INTO job_steps (job_id, name, value)
SELECT id, %(name)s::text, %(value)s::jsonb FROM fence
ON CONFLICT (job_id, name) DO UPDATE SET value = excluded.value

-- job_cancel_pending --
-- A pending or blocked job is cancelled at once.
UPDATE jobs SET state = 'cancelled', finished_at = %(now)s::float8
WHERE id = %(id)s AND state IN ('pending', 'blocked')

-- job_cancel_running --
-- A running job is flagged; its supervisor kills the child and records the cancel.
UPDATE jobs SET cancel_requested = true WHERE id = %(id)s AND state = 'running'

-- job_state --
-- One job's state.
SELECT state FROM jobs WHERE id = %(id)s

-- job_retry --
-- A failed or cancelled job runs again with its attempts reset (durable steps kept).
UPDATE jobs
SET state = 'pending', attempts = 0, error = NULL, result = NULL, run_at = %(now)s::float8,
    finished_at = NULL, started_at = NULL, progress = NULL, fraction = NULL, pid = NULL,
    failure_handled = false
WHERE id = %(id)s AND state IN ('failed', 'cancelled')

-- job_rescue_expired --
-- Running jobs whose lease passed go back to pending, or end if cancelled or out of attempts.
UPDATE jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN attempts >= max_attempts THEN 'failed'
                 ELSE 'pending' END,
    error = 'attempt ' || attempts || ' lost its lease (its supervisor stopped renewing it)',
    finished_at = CASE WHEN cancel_requested OR attempts >= max_attempts
                       THEN %(now)s::float8 END,
    progress = CASE WHEN cancel_requested OR attempts >= max_attempts THEN progress END,
    fraction = CASE WHEN cancel_requested OR attempts >= max_attempts THEN fraction END,
    pid = NULL,
    run_at = %(now)s::float8, owner = NULL, lease_until = NULL, cancel_requested = false
WHERE state = 'running'
  AND (lease_until < %(now)s::float8 OR lease_until IS NULL OR lease_until = 'NaN'::float8)
RETURNING id

-- job_owners_running --
-- Owners of running jobs whose owner string starts with a host's prefix.
SELECT DISTINCT owner FROM jobs
WHERE state = 'running' AND starts_with(owner, %(prefix)s::text)

-- job_expire_owner --
-- Brings forward the lease of every job an owner holds (it is gone), so
-- that the next rescue takes them.
UPDATE jobs SET lease_until = %(until)s::float8
WHERE state = 'running' AND owner = %(owner)s::text AND lease_until > %(until)s::float8

-- job_fail_past_deadline --
-- Pending jobs past their deadline fail instead of starting.
UPDATE jobs SET state = 'failed', error = 'passed its deadline', finished_at = %(now)s::float8
WHERE state = 'pending' AND deadline_at IS NOT NULL AND deadline_at <= %(now)s::float8
RETURNING id

-- job_prune --
-- Deletes one bounded batch of finished jobs; returns their ids (their attempts go next).
-- Members of a batch go with their batch.
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs
    WHERE state = ANY(%(states)s::text[]) AND finished_at < %(before)s::float8
      AND batch_id IS NULL
    LIMIT %(limit)s)
RETURNING id

-- queue_set_limit --
-- Sets (or clears, with NULL) a queue's cluster-wide concurrency, and who did it when.
INSERT INTO queues (name, concurrency, limit_by, limit_at)
VALUES (%(queue)s, %(limit)s::integer, %(by)s::text, %(now)s::float8)
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, limit_by = excluded.limit_by, limit_at = excluded.limit_at

-- queue_set_paused --
-- Pauses or resumes claims from a queue, cluster-wide.
INSERT INTO queues (name, paused) VALUES (%(queue)s, %(paused)s::boolean)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused

-- queue_counts --
-- Jobs per queue and state, and the earliest run_at already due of each (a pending job
-- waits from its run_at; one delayed into the future is not waiting yet).
SELECT queue, CASE WHEN state = 'running' AND started_at IS NULL THEN 'reserved' ELSE state END
       AS state, count(*) AS n, min(CASE WHEN run_at <= %(now)s THEN run_at END) AS oldest
FROM jobs GROUP BY 1, 2

-- schema_table_create --
-- The table that records applied migrations.
CREATE TABLE IF NOT EXISTS procqueue_schema (
    version integer PRIMARY KEY, applied_at double precision NOT NULL)

-- job_failures_unhandled --
-- Jobs that gave up and whose on_failure handler was not enqueued yet; a racing sweeper
-- skips the rows this one holds.
SELECT id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
       fraction, key, serial_key, tags, run_at, created_at, started_at, finished_at, deadline_at,
       pid, owner, on_failure
FROM jobs
WHERE state = 'failed' AND on_failure IS NOT NULL AND NOT failure_handled
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- job_mark_failure_handled --
-- Marks a job's on_failure handler as enqueued.
UPDATE jobs SET failure_handled = true
WHERE id = %(id)s AND state = 'failed' AND NOT failure_handled

-- chore_claim --
-- Takes a periodic chore if it has not run for `every` seconds (one row changes for one taker).
INSERT INTO chores (name, last_run) VALUES (%(name)s, %(now)s::float8)
ON CONFLICT (name) DO UPDATE SET last_run = excluded.last_run
WHERE chores.last_run <= %(now)s::float8 - %(every)s::float8

-- pg_lock --
-- Takes a transaction-scoped advisory lock (migrations, claims); released at commit.
SELECT pg_advisory_xact_lock(%(key)s::bigint)

-- pg_generic_plans --
-- Until the transaction ends, prepared statements run their generic plan: a claim's
-- statements are planned once per connection instead of at every claim (their custom plans
-- took longer to make than to run), and each is driven by an index whatever its parameters.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)

-- pg_schema_exists --
-- Whether the store's schema exists (CREATE SCHEMA needs a privilege even when it does).
SELECT count(*) AS n FROM pg_catalog.pg_namespace WHERE nspname = %(schema)s

-- pg_notify --
-- Wakes listening supervisors when the surrounding transaction commits.
SELECT pg_catalog.pg_notify(%(channel)s, '')

-- pg_search_path_get --
-- The caller's search_path, saved before a transactional enqueue.
SELECT pg_catalog.current_setting('search_path') AS path

-- pg_search_path_set --
-- Sets search_path for the rest of the current transaction only.
SELECT pg_catalog.set_config('search_path', %(path)s, true)

-- job_set_pid --
-- Records which child process runs an attempt and when it started it (fenced).
UPDATE jobs SET pid = %(pid)s, started_at = coalesce(%(started_at)s::float8, started_at)
WHERE id = %(id)s AND attempts = %(attempt)s AND state = 'running'

-- job_fail_undecodable --
-- Fails a job just taken whose row does not decode, in the claim's transaction: it never runs.
UPDATE jobs
SET state = 'failed', error = %(error)s::text, finished_at = %(now)s::float8,
    owner = NULL, lease_until = NULL, cancel_requested = false
WHERE id = %(id)s AND state = 'running'

-- pg_bounds_set --
-- Sets this transaction's statement and lock timeouts (milliseconds, as text).
SELECT pg_catalog.set_config('statement_timeout', %(ms)s, true),
       pg_catalog.set_config('lock_timeout', %(ms)s, true)

-- ---- Operations: attempt history, supervisors, managed limits, bulk actions ----

-- attempt_record_set --
-- Attempts' history rows in one statement (%(rows)s: a JSON array of each outcome's values),
-- written with their outcomes in the same transaction and fenced the same way (nothing is
-- written for an attempt no longer running). A cancel that wins over a retry or a hand-back
-- is recorded as the cancel it becomes.
INSERT INTO job_attempts (job_id, attempt, owner, child_pid, claimed_at, started_at, ended_at,
                          outcome, exit_reason, error, peak_memory)
SELECT jobs.id, jobs.attempts, jobs.owner, coalesce(r.child_pid, jobs.pid), jobs.claimed_at,
       r.started_at, %(now)s::float8,
       CASE WHEN jobs.cancel_requested AND r.state = 'pending' THEN 'cancelled'
            ELSE r.outcome END,
       r.exit_reason, r.error, r.peak_memory
FROM json_to_recordset(%(rows)s::json) AS r(
         id bigint, attempt integer, state text, outcome text, child_pid integer,
         started_at float8, exit_reason text, error text, peak_memory float8)
JOIN jobs ON jobs.id = r.id
WHERE jobs.attempts = r.attempt AND jobs.state = 'running'
  AND (%(owner)s::text = '' OR jobs.owner = %(owner)s::text)
ORDER BY jobs.id
-- The rows are locked as they are read: a rescue or another outcome changing one meanwhile is
-- waited for and the row read again, so no row tells an ending that the fence then refuses.
FOR UPDATE OF jobs

-- attempt_record_lost --
-- History rows of the running jobs whose lease passed, written just before job_rescue_expired
-- in its transaction (which holds the claim lock, so two rescuers never both write them).
INSERT INTO job_attempts (job_id, attempt, owner, child_pid, claimed_at, started_at, ended_at,
                          outcome, exit_reason, error, peak_memory)
SELECT id, attempts, owner, pid, claimed_at, started_at, %(now)s::float8, 'lost', NULL,
       'its lease ran out: its supervisor stopped renewing it', NULL
FROM jobs WHERE state = 'running'
  AND (lease_until < %(now)s::float8 OR lease_until IS NULL OR lease_until = 'NaN'::float8)
-- Locked as read (in id order), as attempt_record is: an outcome or a renewal committed
-- meanwhile is seen, and its job neither rescued nor said to be.
ORDER BY id FOR UPDATE

-- attempt_list --
-- Every recorded attempt of one job, oldest first.
SELECT attempt, owner, child_pid, claimed_at, started_at, ended_at, outcome, exit_reason, error,
       peak_memory
FROM job_attempts WHERE job_id = %(id)s ORDER BY seq

-- attempt_prune --
-- The history of pruned jobs.
DELETE FROM job_attempts WHERE job_id = ANY(%(ids)s::bigint[])

-- step_prune --
-- The durable steps of deleted jobs.
DELETE FROM job_steps WHERE job_id = ANY(%(ids)s::bigint[])

-- supervisor_beat --
-- A supervisor says it is alive, what it runs and how busy it is.
INSERT INTO supervisors (owner, host, pid, version, spec, queues, limits, workers, busy,
                         beat_every, started_at, last_seen)
VALUES (%(owner)s, %(host)s, %(pid)s, %(version)s, %(spec)s, %(queues)s::jsonb,
        %(limits)s::jsonb, %(workers)s, %(busy)s, %(beat_every)s::float8,
        %(started_at)s::float8, %(now)s::float8)
ON CONFLICT (owner) DO UPDATE
SET busy = excluded.busy, workers = excluded.workers, beat_every = excluded.beat_every,
    last_seen = excluded.last_seen

-- supervisor_forget --
-- Rows of supervisors silent since `before` (gone without saying so).
DELETE FROM supervisors WHERE last_seen < %(before)s::float8

-- supervisor_remove --
-- A supervisor that stopped cleanly removes its row.
DELETE FROM supervisors WHERE owner = %(owner)s

-- supervisor_list --
-- Every supervisor row, oldest first.
SELECT owner, host, pid, version, spec, queues, limits, workers, busy, beat_every, started_at,
       last_seen
FROM supervisors ORDER BY started_at, owner

-- queue_init_limit --
-- A supervisor's --queue NAME=LIMIT, applied only to a queue whose limit nobody set yet:
-- an operator's or an earlier supervisor's setting is never overwritten (the caller compares).
INSERT INTO queues (name, concurrency, limit_by, limit_at)
VALUES (%(queue)s, %(limit)s::integer, %(by)s::text, %(now)s::float8)
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, limit_by = excluded.limit_by, limit_at = excluded.limit_at
WHERE queues.concurrency IS NULL AND queues.limit_by IS NULL

-- job_count_where --
-- How many jobs in `states` match the filters (NULL matches all; since: created at or after).
SELECT count(*) AS n FROM jobs
WHERE state = ANY(%(states)s::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(since)s::float8 IS NULL OR created_at >= %(since)s::float8)

-- job_retry_where --
-- job_retry for every failed or cancelled job matching the filters.
UPDATE jobs
SET state = 'pending', attempts = 0, error = NULL, result = NULL, run_at = %(now)s::float8,
    finished_at = NULL, started_at = NULL, progress = NULL, fraction = NULL, pid = NULL,
    failure_handled = false
WHERE state IN ('failed', 'cancelled') AND state = ANY(%(states)s::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(since)s::float8 IS NULL OR created_at >= %(since)s::float8)
RETURNING id

-- job_cancel_pending_where --
-- job_cancel_pending for every pending or blocked job matching the filters.
UPDATE jobs SET state = 'cancelled', finished_at = %(now)s::float8
WHERE state IN ('pending', 'blocked') AND state = ANY(%(states)s::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(since)s::float8 IS NULL OR created_at >= %(since)s::float8)
RETURNING id

-- job_cancel_running_where --
-- job_cancel_running for every running job matching the filters.
UPDATE jobs SET cancel_requested = true
WHERE state = 'running' AND NOT cancel_requested AND state = ANY(%(states)s::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(since)s::float8 IS NULL OR created_at >= %(since)s::float8)
-- Batches. A batch completes in the transaction that makes its last
-- member terminal: that transaction first locks the batch's row (batch_lock*;
-- on PostgreSQL, FOR UPDATE) and only then, in a statement of its own and so
-- with a fresh snapshot, asks whether any member is still open (batch_complete*).
-- Of two transactions ending a batch's last two members, the second to take the
-- lock sees the first's member committed: exactly one of them completes it.

-- batch_insert --
-- Creates an open batch.
INSERT INTO batches (name, meta, complete_job, success_job, created_at)
VALUES (%(name)s, %(meta)s::json, %(complete_job)s::json, %(success_job)s::json, %(now)s)
RETURNING id

-- batch_lock --
-- Locks one batch's row until the transaction ends; its state.
SELECT id, sealed_at, completed_at FROM batches WHERE id = %(id)s FOR UPDATE

-- batch_lock_of_jobs --
-- Locks, in id order, the rows of the batches of the given jobs that are terminal.
SELECT id FROM batches
WHERE id IN (SELECT batch_id FROM jobs
             WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('done', 'failed', 'cancelled'))
ORDER BY id FOR UPDATE

-- batch_complete_of_jobs --
-- Completes the sealed batches of the given jobs that have members and no open member
-- (run after batch_lock_of_jobs); returns the ids completed now.
UPDATE batches AS b SET completed_at = %(now)s, completions = b.completions + 1
WHERE b.id IN (SELECT batch_id FROM jobs
               WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('done', 'failed', 'cancelled'))
  AND b.sealed_at IS NOT NULL AND b.completed_at IS NULL
  AND EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id)
  AND NOT EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id AND m.state IN ('blocked', 'pending', 'running'))
RETURNING id

-- batch_complete --
-- Completes one sealed batch with members and no open member (run after batch_lock).
UPDATE batches AS b SET completed_at = %(now)s, completions = b.completions + 1
WHERE b.id = %(id)s
  AND b.sealed_at IS NOT NULL AND b.completed_at IS NULL
  AND EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id)
  AND NOT EXISTS (SELECT 1 FROM jobs m WHERE m.batch_id = b.id AND m.state IN ('blocked', 'pending', 'running'))
RETURNING id

-- batch_seal --
-- Seals a batch: no member joins it any more, and it may complete.
UPDATE batches SET sealed_at = coalesce(sealed_at, %(now)s::float8) WHERE id = %(id)s

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
FROM batches b WHERE b.id = %(id)s

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
WHERE (%(name)s::text IS NULL OR b.name = %(name)s::text)
  AND (%(state)s::text IS NULL
       OR (%(state)s::text = 'open' AND b.sealed_at IS NULL)
       OR (%(state)s::text = 'running' AND b.sealed_at IS NOT NULL AND b.completed_at IS NULL)
       OR (%(state)s::text = 'complete' AND b.completed_at IS NOT NULL))
ORDER BY b.id DESC
LIMIT %(limit)s

-- batch_members --
-- One page of a batch's members in id order, after `after`, optionally in one state.
SELECT id, name, queue, state, priority, attempts, max_attempts, args, result, error, progress,
       fraction, key, serial_key, tags, run_at, created_at, started_at, finished_at, deadline_at,
       pid, owner
FROM jobs
WHERE batch_id = %(id)s AND id > %(after)s
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
ORDER BY id
LIMIT %(limit)s

-- batch_cancel_pending --
-- Cancels a batch's pending and blocked members at once.
UPDATE jobs SET state = 'cancelled', finished_at = %(now)s::float8
WHERE batch_id = %(id)s AND state IN ('pending', 'blocked')
RETURNING id

-- batch_cancel_running --
-- Flags a batch's running members (in id order); their supervisors kill them.
UPDATE jobs SET cancel_requested = true
WHERE id IN (SELECT id FROM jobs WHERE batch_id = %(id)s AND state = 'running'
ORDER BY id FOR UPDATE)

-- batch_mark_cancelled --
-- Records a batch's cancel; a cancelled batch is sealed too (nothing joins it any more).
UPDATE batches SET cancelled_at = coalesce(cancelled_at, %(now)s::float8),
                   sealed_at = coalesce(sealed_at, %(now)s::float8)
WHERE id = %(id)s

-- batch_retry_failed --
-- A batch's failed members run again with their attempts reset.
UPDATE jobs
SET state = 'pending', attempts = 0, error = NULL, result = NULL, run_at = %(now)s::float8,
    finished_at = NULL, started_at = NULL, failure_handled = false
WHERE batch_id = %(id)s AND state = 'failed'
RETURNING id

-- batch_lock_of_reopened --
-- Locks, in id order, the rows of the batches of the given jobs whatever their states, complete
-- or not (before batch_reopen_of_jobs): a transaction ending a batch's last member holds this lock
-- from before it asks whether a member is open until it commits.
SELECT id FROM batches
WHERE id IN (SELECT batch_id FROM jobs WHERE id = ANY(%(ids)s::bigint[]))
ORDER BY id FOR UPDATE

-- batch_reopen_of_jobs --
-- The completed batches of jobs that run again are running again (their next completion counts
-- anew); run after batch_lock_of_reopened, so it sees a completion committed while it waited.
UPDATE batches SET completed_at = NULL, cancelled_at = NULL
WHERE id IN (SELECT batch_id FROM jobs WHERE id = ANY(%(ids)s::bigint[]))
  AND completed_at IS NOT NULL

-- batch_prunable --
-- Completed batches finished before `before` with no failed member (failed jobs stay until
-- retried or deleted by hand), oldest first.
SELECT id FROM batches b
WHERE b.completed_at < %(before)s::float8
  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.batch_id = b.id AND j.state = 'failed')
ORDER BY b.id LIMIT %(limit)s

-- batch_delete_members --
-- Deletes one bounded batch of a batch's finished members; returns their ids (their attempts
-- and steps go next).
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs WHERE batch_id = %(id)s AND state IN ('done', 'failed', 'cancelled')
    LIMIT %(limit)s)
RETURNING id

-- batch_delete --
-- Deletes a completed batch whose members are all gone.
DELETE FROM batches
WHERE id = %(id)s AND completed_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM jobs WHERE batch_id = %(id)s)

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
LIMIT %(limit)s

-- job_finished_per_minute --
-- Done and failed jobs per UTC minute since a time, with how many of them ended after a
-- second time (the rate now); counted in the database, so it holds whatever the volume.
SELECT floor(finished_at / 60)::bigint AS minute, state, count(*) AS n,
       count(*) FILTER (WHERE finished_at > %(recent)s::float8) AS recent
FROM jobs WHERE state IN ('done', 'failed') AND finished_at >= %(since)s::float8
GROUP BY 1, 2

-- ---- Workflows: dependencies between jobs (see store/_deps.py) ----
-- A job's edges (job_deps) name the jobs it depends on; an edge is resolved once its
-- dependency is terminal. Every statement here is idempotent: run again with the same
-- ids, it changes nothing more.

-- dep_lock_parents --
-- The jobs named as dependencies by an enqueue, locked until it commits (so none of them
-- ends unseen between this read and the new edges).
SELECT id, name, state FROM jobs WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR SHARE

-- dep_insert --
-- One edge: job_id waits for depends_on (resolved when that one is terminal already).
INSERT INTO job_deps (job_id, depends_on, resolved)
VALUES (%(job_id)s::bigint, %(depends_on)s::bigint, %(resolved)s::boolean)
ON CONFLICT (job_id, depends_on) DO NOTHING
RETURNING job_id

-- dep_lock_dependents --
-- Locks, in id order, the blocked dependents of the given jobs before they are decided, and,
-- below those that ended failed or cancelled, every blocked job downstream: the cancel may run
-- down to them, level by level, and locking them then, after rows of a lower level with higher
-- ids, would cross the id order another ending takes (a deadlock).
-- Driven by the edges (job_deps_depends_on), each dependent then found by its key: the cost
-- follows the dependents, never the size of the jobs table.
WITH RECURSIVE down(id) AS (
    SELECT e.job_id FROM job_deps e JOIN jobs r ON r.id = e.depends_on
    WHERE e.depends_on = ANY(%(ids)s::bigint[]) AND r.state IN ('failed', 'cancelled')
  UNION
    SELECT e.job_id FROM job_deps e JOIN down ON e.depends_on = down.id
), hit(id) AS (
    SELECT job_id FROM job_deps WHERE depends_on = ANY(%(ids)s::bigint[])
  UNION
    SELECT id FROM down
)
SELECT j.id FROM hit JOIN jobs j ON j.id = hit.id
WHERE j.state = 'blocked'
ORDER BY j.id FOR UPDATE OF j

-- dep_cancel_dependents --
-- Blocked dependents (without allow_failure) of the given jobs that ended failed or
-- cancelled are cancelled, naming the lowest such dependency (run before dep_resolve).
UPDATE jobs
SET state = 'cancelled', finished_at = %(now)s::float8, blocked_by = f.parent,
    error = 'dependency ' || f.parent::text || ' (' || p.name || ') '
            || CASE WHEN p.state = 'failed' THEN 'failed' ELSE 'was cancelled' END
FROM (SELECT e.job_id, min(e.depends_on) AS parent
      FROM job_deps e JOIN jobs q ON q.id = e.depends_on
      WHERE e.depends_on = ANY(%(ids)s::bigint[]) AND NOT e.resolved
        AND q.state IN ('failed', 'cancelled')
      GROUP BY e.job_id) AS f
JOIN jobs AS p ON p.id = f.parent
WHERE jobs.id = f.job_id AND jobs.state = 'blocked' AND NOT jobs.allow_failure
RETURNING jobs.id

-- dep_resolve --
-- Resolves the edges of the given jobs that are terminal.
UPDATE job_deps SET resolved = true
WHERE NOT resolved
  AND depends_on IN (SELECT id FROM jobs WHERE id = ANY(%(ids)s::bigint[])
                     AND state IN ('done', 'failed', 'cancelled'))

-- dep_promote --
-- Blocked dependents of the given jobs with no unresolved edge left become pending.
UPDATE jobs SET state = 'pending', run_at = greatest(run_at, %(now)s::float8)
WHERE state = 'blocked'
  AND id IN (SELECT job_id FROM job_deps WHERE depends_on = ANY(%(ids)s::bigint[]))
  AND NOT EXISTS (SELECT 1 FROM job_deps e WHERE e.job_id = jobs.id AND NOT e.resolved)
RETURNING id

-- dep_cancel_failed_of --
-- The given jobs (just inserted or made pending again, without allow_failure) that depend
-- on a failed or cancelled job are cancelled, naming the lowest such dependency.
UPDATE jobs
SET state = 'cancelled', finished_at = %(now)s::float8, blocked_by = f.parent,
    error = 'dependency ' || f.parent::text || ' (' || p.name || ') '
            || CASE WHEN p.state = 'failed' THEN 'failed' ELSE 'was cancelled' END
FROM (SELECT e.job_id, min(e.depends_on) AS parent
      FROM job_deps e JOIN jobs q ON q.id = e.depends_on
      WHERE e.job_id = ANY(%(ids)s::bigint[]) AND q.state IN ('failed', 'cancelled')
      GROUP BY e.job_id) AS f
JOIN jobs AS p ON p.id = f.parent
WHERE jobs.id = f.job_id AND jobs.state IN ('pending', 'blocked') AND NOT jobs.allow_failure
RETURNING jobs.id

-- dep_block_of --
-- The given pending jobs (just inserted or made pending again) with an unresolved edge
-- are blocked; none names a dependency that cancelled it any more.
UPDATE jobs
SET blocked_by = NULL,
    state = CASE WHEN EXISTS (SELECT 1 FROM job_deps e WHERE e.job_id = jobs.id AND NOT e.resolved)
                 THEN 'blocked' ELSE state END
WHERE id = ANY(%(ids)s::bigint[]) AND state = 'pending'

-- dep_unresolve --
-- The edges of the given jobs that run again are unresolved again.
UPDATE job_deps SET resolved = false
WHERE resolved
  AND depends_on IN (SELECT id FROM jobs WHERE id = ANY(%(ids)s::bigint[])
                     AND state NOT IN ('done', 'failed', 'cancelled'))

-- dep_reblock_dependents --
-- Pending dependents of the given jobs that run again wait for them again (run after
-- dep_unresolve); running and finished ones are left as they are.
UPDATE jobs SET state = 'blocked'
WHERE state = 'pending'
  AND id IN (SELECT job_id FROM job_deps WHERE depends_on = ANY(%(ids)s::bigint[]))
  AND EXISTS (SELECT 1 FROM job_deps e WHERE e.job_id = jobs.id AND NOT e.resolved)

-- dep_reopen_dependents --
-- Jobs cancelled because one of the given jobs failed or was cancelled wait for it again.
UPDATE jobs SET state = 'blocked', error = NULL, finished_at = NULL, blocked_by = NULL
WHERE blocked_by = ANY(%(ids)s::bigint[]) AND state = 'cancelled'
RETURNING id

-- dep_prune --
-- The edges of pruned jobs, either way.
DELETE FROM job_deps
WHERE job_id = ANY(%(ids)s::bigint[])
   OR depends_on = ANY(%(ids)s::bigint[])

-- dep_list --
-- The edges of the given jobs, with their dependencies' names and states.
SELECT e.job_id, e.depends_on, p.name, p.state
FROM job_deps e LEFT JOIN jobs p ON p.id = e.depends_on
WHERE e.job_id = ANY(%(ids)s::bigint[])
ORDER BY e.job_id, e.depends_on

-- dep_results_of --
-- The results of the done dependencies of the given jobs.
SELECT e.job_id, p.id, p.result FROM job_deps e JOIN jobs p ON p.id = e.depends_on
WHERE e.job_id = ANY(%(ids)s::bigint[]) AND p.state = 'done'
ORDER BY e.job_id, p.id
