-- The smallest transaction that keeps exactly-once, as issue #15 gives it:
-- claim the key (a duplicate gets no row back), one effect, complete the key
-- with its answer. Tables: bench/minimal-schema.sql (search_path = minimal).
-- Run with -M prepared. Keys are random over 10^12, so a collision (which
-- ON CONFLICT would absorb) is negligible; pgbench has no string variables,
-- so the request hash is a random number too.
\set key random(1, 1000000000000)
\set hash random(1, 1000000000000000000)
BEGIN;
INSERT INTO keys (scope, key, request_hash) VALUES ('demo', :key, :hash) ON CONFLICT (scope, key) DO NOTHING RETURNING key;
INSERT INTO ledger (scope, key, amount) VALUES ('demo', :key, 1000);
UPDATE keys SET status = 'completed', response_code = 200, response_body = '{}' WHERE scope = 'demo' AND key = :key;
COMMIT;
