-- What the dashboard draws (issue #16): per endpoint and minute, how many
-- deliveries ended in each outcome (`processed`, `replayed`, `failed`,
-- `conflict:<kind>`, `rejected:<reason>`), split by a log-scale latency
-- bucket. Rejections and replays write nothing else, so this is the only
-- place they are counted. Rows are added to by the in-memory recorder's
-- periodic flush (`count = count + excluded.count`), so several instances
-- add into the same rows; the purge deletes rows older than 8 days.
-- `minute` is the minute's start in Unix seconds.
CREATE TABLE traffic (
    endpoint TEXT NOT NULL,
    minute BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (endpoint, minute, outcome, bucket)
);
-- The dashboard's "all endpoints" view and the purge read by time alone.
CREATE INDEX traffic_minute ON traffic (minute);
