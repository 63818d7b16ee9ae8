-- For providers whose delivery id is not covered by the signature (GitHub,
-- Shopify), a captured body replayed under a fresh id must not run twice:
-- such deliveries also claim their body hash. NULL for every other provider,
-- and NULLs never conflict.
ALTER TABLE deliveries ADD COLUMN body_key TEXT;
CREATE UNIQUE INDEX deliveries_body_key ON deliveries (endpoint, body_key);
