-- What operators need to answer "what happened to job 42?" and "who is
-- working?": one row per attempt, one row per live supervisor,
-- and who set each queue's limit.
CREATE TABLE IF NOT EXISTS job_attempts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    owner TEXT,
    child_pid INTEGER,
    claimed_at REAL,
    started_at REAL,
    ended_at REAL NOT NULL,
    outcome TEXT NOT NULL,
    exit_reason TEXT,
    error TEXT,
    peak_memory REAL
);
CREATE INDEX IF NOT EXISTS job_attempts_job ON job_attempts (job_id, seq);
CREATE TABLE IF NOT EXISTS supervisors (
    owner TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    version TEXT NOT NULL,
    spec TEXT NOT NULL,
    queues TEXT,
    limits TEXT NOT NULL DEFAULT '{}',
    workers INTEGER NOT NULL,
    busy INTEGER NOT NULL,
    beat_every REAL NOT NULL,
    started_at REAL NOT NULL,
    last_seen REAL NOT NULL
);
ALTER TABLE queues ADD COLUMN limit_by TEXT;
ALTER TABLE queues ADD COLUMN limit_at REAL;
