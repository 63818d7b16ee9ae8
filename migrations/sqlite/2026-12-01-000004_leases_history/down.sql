DROP TABLE delivery_history;
ALTER TABLE deliveries DROP COLUMN request_body;
