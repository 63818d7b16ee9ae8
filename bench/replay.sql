-- What the receiver sends PostgreSQL for one replay: a primary-key read of
-- a completed row, outside any transaction (ids 1..:keys were loaded by
-- bench/run.sh as completed rows, like the load generator's replay keys).
\set n random(1, :keys)
SELECT endpoint, delivery_id, request_hash, status, event_type, response_status, response_content_type, response_body, attempts, lease_owner, lease_expires_at, received_at, completed_at, body_key, response_location FROM deliveries WHERE endpoint = 'bench' AND delivery_id = 'pgr-' || :n::text;
