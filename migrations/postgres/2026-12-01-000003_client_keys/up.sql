-- Client routes replay the headers that matter besides the content type.
ALTER TABLE deliveries ADD COLUMN response_location TEXT;

-- The showcase route's domain table (POST /payments). No unique constraint
-- on the idempotency key: a double effect must show as a second row.
CREATE TABLE payments (
    id              TEXT      PRIMARY KEY,
    tenant          TEXT,
    order_id        TEXT      NOT NULL,
    amount          BIGINT    NOT NULL CHECK (amount > 0),
    currency        TEXT      NOT NULL,
    status          TEXT      NOT NULL,
    idempotency_key TEXT,
    created_at      TIMESTAMP NOT NULL
);
