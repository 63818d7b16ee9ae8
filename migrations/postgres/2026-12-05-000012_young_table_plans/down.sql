CREATE INDEX IF NOT EXISTS deliveries_endpoint_received_at ON deliveries (endpoint, received_at);
DROP INDEX IF EXISTS deliveries_endpoint_received_at_set;
