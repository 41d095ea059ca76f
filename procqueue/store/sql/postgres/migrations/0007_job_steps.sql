-- Durable steps get a row each: saving one writes that row only, so a job's
-- n-th step costs O(its size), not O(every step before it).
CREATE TABLE IF NOT EXISTS job_steps (
    job_id bigint NOT NULL,
    name text NOT NULL,
    value jsonb NOT NULL,
    PRIMARY KEY (job_id, name)
);
INSERT INTO job_steps (job_id, name, value)
SELECT j.id, s.key, s.value FROM jobs j, jsonb_each(j.steps) s
ON CONFLICT (job_id, name) DO NOTHING;
ALTER TABLE jobs DROP COLUMN IF EXISTS steps;
