DROP INDEX deliveries_body_key;
ALTER TABLE deliveries DROP COLUMN body_key;
