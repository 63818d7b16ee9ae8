-- What the receiver sends PostgreSQL for one fresh Standard Webhooks
-- delivery with the default handlers ["record", "payments"]: one statement,
-- its own transaction (src/store/one_statement.rs). The claim inserts the
-- key's row completed, with the stored answer; the event and the ledger row
-- are each an INSERT ... SELECT ... FROM claim, so a claim that lost writes
-- nothing. The receiver prepares it once per connection, as `-M prepared`
-- does here (tests/api/bench_sql.rs checks its tables and column lists
-- against a real delivery's), with the same payload sizes. The differences:
-- the receiver binds parameters where this writes literals (`"recorded":
-- true` has a space, because pgbench reads `:true` as a variable), and it
-- draws its ledger ids from the sequence a hundred at a time beforehand,
-- where this takes a random id above the sequence's range. Delivery ids are
-- random over 10^12, so a collision (which ON CONFLICT would absorb) is
-- negligible.
\set n random(1, 1000000000000)
\set lid random(1000000000000000, 2000000000000000)
WITH claim AS (INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, event_type, attempts, received_at, completed_at, body_key, request_body, response_status, response_content_type, response_body, response_location) VALUES ('bench', 'pgb-' || :n::text, '5f0c6e2d3b1a4f5e8d7c6b5a49382716a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0', 'completed', 'payment.succeeded', 1, now()::timestamp, now()::timestamp, NULL, convert_to('{"data":{"amount":4200,"currency":"EUR","id":"pay_pgb-' || :n::text || '","order_id":"order_1001"},"event_id":"pgb-' || :n::text || '","event_type":"payment.succeeded","id":"pgb-' || :n::text || '","type":"payment.succeeded"}', 'UTF8'), 200, 'application/json', convert_to('{"attempt":1,"delivery_id":"pgb-' || :n::text || '","effects":{"payments":{"kind":"charge","ledger_entry_id":' || :lid::text || '},"record":{"recorded": true}},"endpoint":"bench","event_type":"payment.succeeded","processed_at":"2026-12-01T04:11:44.506Z","status":"processed"}', 'UTF8'), NULL) ON CONFLICT DO NOTHING RETURNING endpoint, delivery_id), w0 AS (INSERT INTO events (endpoint, delivery_id, event_type, payload, recorded_at) SELECT endpoint, delivery_id, 'payment.succeeded', '{"data":{"amount":4200,"currency":"EUR","id":"pay_pgb-' || :n::text || '","order_id":"order_1001"},"event_id":"pgb-' || :n::text || '","event_type":"payment.succeeded","id":"pgb-' || :n::text || '","type":"payment.succeeded"}', now()::timestamp FROM claim ON CONFLICT (endpoint, delivery_id) DO UPDATE SET event_type = excluded.event_type, payload = excluded.payload, recorded_at = excluded.recorded_at), w1 AS (INSERT INTO ledger_entries (id, endpoint, delivery_id, kind, payment_id, order_id, amount, currency, created_at) SELECT :lid, endpoint, delivery_id, 'charge', 'pay_pgb-' || :n::text, 'order_1001', 4200, 'EUR', now()::timestamp FROM claim) SELECT 1 FROM claim;
