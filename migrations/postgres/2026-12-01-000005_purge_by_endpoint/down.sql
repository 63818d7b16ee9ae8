DROP INDEX IF EXISTS deliveries_endpoint_received_at;
