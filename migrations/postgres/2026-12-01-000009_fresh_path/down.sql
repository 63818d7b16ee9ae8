ALTER TABLE deliveries RESET (fillfactor);
CREATE UNIQUE INDEX IF NOT EXISTS deliveries_body_key ON deliveries (endpoint, body_key);
DROP INDEX IF EXISTS deliveries_body_key_set;
