DROP TABLE payments;
ALTER TABLE deliveries DROP COLUMN response_location;
