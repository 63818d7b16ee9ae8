ALTER TABLE deliveries DROP COLUMN replays;
