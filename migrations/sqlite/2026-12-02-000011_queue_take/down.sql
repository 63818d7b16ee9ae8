CREATE INDEX IF NOT EXISTS queue_jobs_due ON queue_jobs (next_run_at) WHERE state IN ('queued', 'retrying', 'running');
DROP INDEX IF EXISTS queue_jobs_next;
