DROP TABLE ordering_versions;
DROP TABLE queue_pauses;
DROP TABLE queue_jobs;
