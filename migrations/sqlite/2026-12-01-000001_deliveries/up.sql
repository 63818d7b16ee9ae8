-- One row per (endpoint, delivery id): the primary key is the atomic claim.
-- Timestamps are UTC, stored without a zone so that the same Diesel schema
-- serves SQLite and PostgreSQL.
CREATE TABLE deliveries (
    endpoint              TEXT      NOT NULL,
    delivery_id           TEXT      NOT NULL,
    request_hash          TEXT      NOT NULL,
    status                TEXT      NOT NULL CHECK (status IN ('in_progress', 'completed')),
    event_type            TEXT,
    response_status       INTEGER,
    response_content_type TEXT,
    response_body         BLOB,
    attempts              INTEGER   NOT NULL DEFAULT 1,
    lease_owner           TEXT,
    lease_expires_at      TIMESTAMP,
    received_at           TIMESTAMP NOT NULL,
    completed_at          TIMESTAMP,
    PRIMARY KEY (endpoint, delivery_id),
    -- a completed row always carries the response it replays
    CHECK (status <> 'completed' OR (response_status IS NOT NULL AND response_body IS NOT NULL AND completed_at IS NOT NULL)),
    -- an in-progress row always has someone responsible for it
    CHECK (status <> 'in_progress' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE INDEX deliveries_received_at ON deliveries (received_at);

-- The verified payload of every processed event (the `record` handler).
CREATE TABLE events (
    endpoint    TEXT      NOT NULL,
    delivery_id TEXT      NOT NULL,
    event_type  TEXT,
    payload     TEXT      NOT NULL,
    recorded_at TIMESTAMP NOT NULL,
    PRIMARY KEY (endpoint, delivery_id)
);

-- The `payments` handler's domain table. Deliberately without a unique
-- constraint on the delivery: a double effect must be visible as a second row.
CREATE TABLE ledger_entries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint    TEXT      NOT NULL,
    delivery_id TEXT      NOT NULL,
    kind        TEXT      NOT NULL CHECK (kind IN ('charge', 'refund')),
    payment_id  TEXT      NOT NULL,
    order_id    TEXT,
    amount      BIGINT    NOT NULL CHECK (amount > 0),
    currency    TEXT      NOT NULL,
    created_at  TIMESTAMP NOT NULL
);
CREATE INDEX ledger_entries_delivery ON ledger_entries (endpoint, delivery_id);
