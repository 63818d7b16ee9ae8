ALTER TABLE outbox
    DROP CONSTRAINT outbox_state,
    ADD CONSTRAINT outbox_state_check CHECK (state IN ('pending', 'sent', 'failed')),
    ADD CONSTRAINT outbox_check CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL));

ALTER TABLE queue_jobs
    DROP CONSTRAINT queue_jobs_state,
    ADD CONSTRAINT queue_jobs_state_check CHECK (state IN ('queued', 'running', 'retrying', 'done', 'dead', 'cancelled')),
    ADD CONSTRAINT queue_jobs_check CHECK (state <> 'running' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL));
