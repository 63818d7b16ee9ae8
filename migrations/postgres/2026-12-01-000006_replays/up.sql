-- How many redeliveries were answered from the store (Idempotent-Replayed)
-- for this key, for operators. Counted after each replay is answered, off
-- its critical path: an increment may be lost, never a replay slowed.
ALTER TABLE deliveries ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
