-- Ids are never reused (DESIGN.md section 6). PostgreSQL's identity sequence
-- never hands an id out twice, so nothing changes here; this migration keeps
-- the version numbers of both backends in step with SQLite's 0003, which
-- rebuilds its jobs table with AUTOINCREMENT.
SELECT 1;
