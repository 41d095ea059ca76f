-- What the producer's around_enqueue hooks store with a job (a JSON object of
-- text, e.g. a W3C trace context), handed to the child with every attempt.
-- NULL when no hook added any.
ALTER TABLE jobs ADD COLUMN headers TEXT;
