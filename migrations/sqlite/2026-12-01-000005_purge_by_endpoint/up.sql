-- The purge deletes the keys of an endpoint with its own retention by
-- `endpoint = ? AND received_at <= ? ORDER BY received_at`: this index
-- serves both the range and the order, where the primary key would make
-- every batch read and sort all of the endpoint's rows. The rest of the
-- table is purged along `deliveries_received_at`.
CREATE INDEX IF NOT EXISTS deliveries_endpoint_received_at ON deliveries (endpoint, received_at);
