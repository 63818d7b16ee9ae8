-- A key is found by its primary key however young the table (issue #15).
--
-- PostgreSQL plans a prepared statement generically after its fifth run on
-- a connection and keeps that plan until the table is next analysed. On a
-- table still (nearly) empty, `endpoint = $1 AND delivery_id = $2` costs
-- the same on the primary key as on `(endpoint, received_at)`, and the
-- generic plans took the latter: every completion, lookup and tally write
-- then read all of the endpoint's rows, until autovacuum's first ANALYZE
-- (a new database, 10 s of `fresh`: 3,377 such scans, 15 M index entries
-- read). Partial on a condition every row meets, the index serves only
-- queries that say `received_at` is not NULL — the purge's range and the
-- listing's order do — and a key lookup never considers it.
--
-- Building it blocks writes to `deliveries` while it runs; on a large
-- table, create it beforehand with CREATE INDEX CONCURRENTLY under this
-- name, and this migration leaves it be.
CREATE INDEX IF NOT EXISTS deliveries_endpoint_received_at_set ON deliveries (endpoint, received_at) WHERE received_at IS NOT NULL;
DROP INDEX IF EXISTS deliveries_endpoint_received_at;
