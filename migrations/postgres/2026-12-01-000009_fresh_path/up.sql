-- A fresh delivery writes fewer index entries (issue #15).
--
-- The body key is set only for providers whose delivery id is unsigned
-- (GitHub, Shopify); every other row stored a NULL entry in this unique
-- index on every insert. Only non-NULL keys can conflict, so the partial
-- index enforces exactly the same rule, and `ON CONFLICT DO NOTHING`
-- without a target still counts it. The new index is built before the old
-- one goes, so the rule holds throughout. Building it blocks writes to
-- `deliveries` while it runs; on a large table, create it beforehand with
-- CREATE UNIQUE INDEX CONCURRENTLY under this name, and this migration
-- leaves it be.
CREATE UNIQUE INDEX IF NOT EXISTS deliveries_body_key_set ON deliveries (endpoint, body_key) WHERE body_key IS NOT NULL;
DROP INDEX IF EXISTS deliveries_body_key;

-- The completion changes no indexed column, so it can be a HOT update
-- (no new index entries) whenever the row's page has room for the grown
-- row. Room is left on new pages; existing pages keep theirs.
ALTER TABLE deliveries SET (fillfactor = 90);
