-- A job claimed ahead waits in its supervisor's memory until a child is free:
-- claimed_at is when a supervisor took it, started_at when a child started it
-- (NULL until then, so users see it reserved, not running).
ALTER TABLE jobs ADD COLUMN claimed_at REAL;
