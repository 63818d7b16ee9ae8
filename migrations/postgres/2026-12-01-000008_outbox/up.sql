-- The transactional outbox: a `publish:NAME` handler writes a row in the
-- transaction that claims and completes the delivery's key, so that the
-- publication commits with the delivery or not at all. The relay of every
-- `serve` process takes pending rows under a lease, publishes them, and
-- marks a row `sent` only after the broker confirmed it. `failed`: the
-- publisher's `max_attempts` ran out; an operator retries or republishes.
CREATE TABLE outbox (
    id               BIGSERIAL PRIMARY KEY,
    publisher        TEXT      NOT NULL,
    endpoint         TEXT      NOT NULL,
    delivery_id      TEXT      NOT NULL,
    -- What brokers deduplicate on: `<endpoint>:<delivery id>`, with a
    -- suffix for an operator's republish.
    message_id       TEXT      NOT NULL,
    -- The subject, routing key or stream, rendered when the row was written.
    destination      TEXT      NOT NULL,
    -- The CloudEvents 1.0 JSON envelope.
    body             BYTEA NOT NULL,
    state            TEXT      NOT NULL CHECK (state IN ('pending', 'sent', 'failed')),
    attempts         INTEGER   NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMP NOT NULL,
    lease_owner      TEXT,
    lease_expires_at TIMESTAMP,
    last_error       TEXT,
    -- `published`, or `duplicate` when the broker already had the id.
    confirmation     TEXT,
    -- When the delivery was received: the end-to-end latency is counted
    -- from here.
    received_at      TIMESTAMP NOT NULL,
    created_at       TIMESTAMP NOT NULL,
    sent_at          TIMESTAMP,
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);
-- One publication per message id and publisher: handlers run again for a
-- delivery (an operator's reprocess) do not publish it twice.
CREATE UNIQUE INDEX outbox_message ON outbox (publisher, message_id);
-- What the relay looks for: a publisher's unsent rows, oldest first.
CREATE INDEX outbox_pending ON outbox (publisher, id) WHERE state = 'pending';
-- A delivery's publications, for the admin page and republish.
CREATE INDEX outbox_delivery ON outbox (endpoint, delivery_id);
-- What the purge deletes: sent rows past the retention.
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE state = 'sent';
