-- The verified body of every delivery, kept with its key: a claim whose
-- owner died mid-way is reconciled from it, and an operator can reprocess it.
ALTER TABLE deliveries ADD COLUMN request_body BYTEA;

-- What happened to a key besides its first processing: takeovers, releases
-- after failures, reconciliations and operator reprocessing, with who and when.
CREATE TABLE delivery_history (
    id          BIGSERIAL PRIMARY KEY,
    endpoint    TEXT      NOT NULL,
    delivery_id TEXT      NOT NULL,
    at          TIMESTAMP NOT NULL,
    kind        TEXT      NOT NULL,
    actor       TEXT,
    detail      TEXT
);
CREATE INDEX delivery_history_key ON delivery_history (endpoint, delivery_id, at);
