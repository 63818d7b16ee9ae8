-- Nothing changes on SQLite: this number made PostgreSQL's
-- `(endpoint, received_at)` index partial, because a generic plan made on
-- a young table walked it for key lookups (see the PostgreSQL migration).
-- SQLite plans each statement when it is prepared and takes the primary
-- key, and it drops `received_at IS NOT NULL` from a query on a NOT NULL
-- column, so a partial index would no longer serve the listing's order.
-- The statement below finds the index in place and does nothing.
CREATE INDEX IF NOT EXISTS deliveries_endpoint_received_at ON deliveries (endpoint, received_at);
