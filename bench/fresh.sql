-- What the receiver sends PostgreSQL for one fresh Standard Webhooks
-- delivery with the default handlers ["record", "payments"], statement for
-- statement as diesel-async issues them: BEGIN, the claim and the two
-- handler inserts in one flight, the fenced completion with COMMIT in a
-- second (src/store/pipeline.rs), all on one pool checkout and all prepared once
-- per connection, as `-M prepared` does here (tests/api/bench_sql.rs checks
-- the statements against a real delivery's), with the same column lists and
-- payload sizes. The one difference in the literals: `"recorded": true` has a space, because pgbench
-- reads `:true` as a variable. Ids are random over 10^12, so a collision
-- (which ON CONFLICT would absorb) is negligible.
\set n random(1, 1000000000000)
-- 1. BEGIN, the claim and the handlers, in one flight (store::pipeline:
-- Store::begin_claim_and_fly; the handlers' statements go right behind the
-- claim, before its answer, once the connection has prepared the claim)
\startpipeline
BEGIN;
INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, event_type, attempts, lease_owner, lease_expires_at, received_at, body_key, request_body) VALUES ('bench', 'pgb-' || :n::text, '5f0c6e2d3b1a4f5e8d7c6b5a49382716a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0', 'in_progress', 'payment.succeeded', 1, 'pid4242-0123abcd/' || md5(:n::text), now()::timestamp + interval '60 s', now()::timestamp, DEFAULT, convert_to('{"data":{"amount":4200,"currency":"EUR","id":"pay_pgb-' || :n::text || '","order_id":"order_1001"},"event_id":"pgb-' || :n::text || '","event_type":"payment.succeeded","id":"pgb-' || :n::text || '","type":"payment.succeeded"}', 'UTF8')) ON CONFLICT DO NOTHING;
-- 2. the record handler
INSERT INTO events (endpoint, delivery_id, event_type, payload, recorded_at) VALUES ('bench', 'pgb-' || :n::text, 'payment.succeeded', '{"data":{"amount":4200,"currency":"EUR","id":"pay_pgb-' || :n::text || '","order_id":"order_1001"},"event_id":"pgb-' || :n::text || '","event_type":"payment.succeeded","id":"pgb-' || :n::text || '","type":"payment.succeeded"}', now()::timestamp) ON CONFLICT (endpoint, delivery_id) DO UPDATE SET event_type = excluded.event_type, payload = excluded.payload, recorded_at = excluded.recorded_at;
-- 3. the payments handler
INSERT INTO ledger_entries (endpoint, delivery_id, kind, payment_id, order_id, amount, currency, created_at) VALUES ('bench', 'pgb-' || :n::text, 'charge', 'pay_pgb-' || :n::text, 'order_1001', 4200, 'EUR', now()::timestamp) RETURNING id;
\endpipeline
-- 4. the completion, fenced by the lease owner, and COMMIT, in one flight
-- (store::pipeline; the receiver flies them once the connection has the
-- completion prepared, which -M prepared has from the first transaction on)
\startpipeline
UPDATE deliveries SET status = 'completed', response_status = 200, response_content_type = 'application/json', response_body = convert_to('{"attempt":1,"delivery_id":"pgb-' || :n::text || '","effects":{"payments":{"kind":"charge","ledger_entry_id":1},"record":{"recorded": true}},"endpoint":"bench","event_type":"payment.succeeded","processed_at":"2026-12-01T04:11:44.506Z","status":"processed"}', 'UTF8'), response_location = NULL, completed_at = now()::timestamp, lease_owner = NULL, lease_expires_at = NULL WHERE endpoint = 'bench' AND delivery_id = 'pgb-' || :n::text AND status = 'in_progress' AND lease_owner = 'pid4242-0123abcd/' || md5(:n::text);
COMMIT;
\endpipeline
