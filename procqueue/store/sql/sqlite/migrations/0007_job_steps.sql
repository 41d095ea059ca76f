-- Durable steps get a row each: saving one writes that row only, so a job's
-- n-th step costs O(its size), not O(every step before it).
CREATE TABLE IF NOT EXISTS job_steps (
    job_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (job_id, name)
) WITHOUT ROWID;
INSERT OR IGNORE INTO job_steps (job_id, name, value)
SELECT j.id, s.key,
       CASE s.type WHEN 'object' THEN s.value WHEN 'array' THEN s.value
                   WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' WHEN 'null' THEN 'null'
                   ELSE json_quote(s.value) END
FROM jobs j, json_each(j.steps) s WHERE json_valid(j.steps);
ALTER TABLE jobs DROP COLUMN steps;
