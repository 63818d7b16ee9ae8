-- The tables of the minimal exactly-once transaction (bench/minimal.sql,
-- issue #15): a key with its stored answer, and one effect. They live in a
-- schema of their own in the bench's temporary database, so that they can
-- never meet the receiver's tables; bench/run.sh runs pgbench with
-- search_path = minimal.
CREATE SCHEMA minimal;
CREATE TABLE minimal.keys (
  scope text NOT NULL,
  key text NOT NULL,
  request_hash text NOT NULL,
  status text NOT NULL DEFAULT 'in_progress',
  response_code integer,
  response_body text,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, key)
);
CREATE INDEX keys_created_at ON minimal.keys (created_at);
CREATE TABLE minimal.ledger (
  id bigserial PRIMARY KEY,
  scope text NOT NULL,
  key text NOT NULL,
  amount bigint NOT NULL
);
