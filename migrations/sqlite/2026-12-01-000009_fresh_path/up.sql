-- A fresh delivery writes fewer index entries (issue #15): the body key is
-- set only for providers whose delivery id is unsigned (GitHub, Shopify),
-- and only non-NULL keys can conflict, so the partial index enforces the
-- same rule without an entry for every other row. `ON CONFLICT DO NOTHING`
-- without a target still counts it.
CREATE UNIQUE INDEX IF NOT EXISTS deliveries_body_key_set ON deliveries (endpoint, body_key) WHERE body_key IS NOT NULL;
DROP INDEX IF EXISTS deliveries_body_key;
