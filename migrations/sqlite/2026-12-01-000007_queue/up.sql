-- Queued mode: a delivery of a `mode = "queued"` endpoint is acknowledged
-- once its job is committed here, in the same transaction as its key; a
-- worker runs its handlers later. `running` with an expired lease is an
-- abandoned attempt, due again.
CREATE TABLE queue_jobs (
    endpoint         TEXT      NOT NULL,
    delivery_id      TEXT      NOT NULL,
    state            TEXT      NOT NULL CHECK (state IN ('queued', 'running', 'retrying', 'done', 'dead', 'cancelled')),
    attempts         INTEGER   NOT NULL DEFAULT 0,
    next_run_at      TIMESTAMP NOT NULL,
    lease_owner      TEXT,
    lease_expires_at TIMESTAMP,
    last_error       TEXT,
    -- Deliveries with the same ordering key run one at a time, oldest
    -- event first (`ordering_key`, `event_time` of the endpoint).
    ordering_key     TEXT,
    event_time       TIMESTAMP,
    received_at      TIMESTAMP NOT NULL,
    finished_at      TIMESTAMP,
    PRIMARY KEY (endpoint, delivery_id),
    CHECK (state <> 'running' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
-- What workers look for: due jobs, oldest first.
CREATE INDEX queue_jobs_due ON queue_jobs (next_run_at) WHERE state IN ('queued', 'retrying', 'running');
CREATE INDEX queue_jobs_ordering ON queue_jobs (endpoint, ordering_key) WHERE ordering_key IS NOT NULL;
-- What the queue gauges count: the jobs not yet done or cancelled.
CREATE INDEX queue_jobs_unfinished ON queue_jobs (endpoint, state) WHERE state IN ('queued', 'running', 'retrying', 'dead');

-- Endpoints whose processing an operator paused: deliveries are still
-- acknowledged and queued; workers leave them alone.
CREATE TABLE queue_pauses (
    endpoint  TEXT      PRIMARY KEY,
    paused_at TIMESTAMP NOT NULL,
    actor     TEXT
);

-- The newest event time processed per ordering key: an older event is
-- stale (recorded and acknowledged, its handlers told so).
CREATE TABLE ordering_versions (
    endpoint     TEXT      NOT NULL,
    ordering_key TEXT      NOT NULL,
    event_time   TIMESTAMP NOT NULL,
    PRIMARY KEY (endpoint, ordering_key)
);
