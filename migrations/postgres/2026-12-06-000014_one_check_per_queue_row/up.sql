-- One CHECK per table on the queue and the outbox, as migration 000013 did
-- for `deliveries` and `ledger_entries` (issue #15).
--
-- PostgreSQL reads each CHECK back from its stored tree and plans it again
-- on every execution of every INSERT and UPDATE, prepared statements
-- included, and an `IN` list's array is built again each time. A queued
-- delivery writes its job three times (queued, running, done) and a
-- publication its outbox row at least twice (pending, sent), each against
-- two checks. Under pgbench of a job's three writes with asynchronous
-- commits, one check without an `IN` list ran 10,588 against 9,603
-- transactions a second (medians of three pairs, 2026-12-06).
--
-- The rule is the same: `state` is NOT NULL, so no part of either
-- expression is ever NULL. A job is in one of the six states, and a
-- running job holds its lease; an outbox row is in one of its three
-- states, with a lease owner exactly when it has a lease expiry.
--
-- NOT VALID: every existing row already met the same rule under the checks
-- replaced here, and a validating scan would hold writes to the table while
-- it ran. New rows and every update are checked all the same; `ALTER TABLE
-- ... VALIDATE CONSTRAINT` records the rule as validated at any time
-- without holding up writes.
ALTER TABLE queue_jobs
    ADD CONSTRAINT queue_jobs_state CHECK (
        state = 'queued' OR state = 'retrying' OR state = 'done' OR state = 'dead' OR state = 'cancelled'
        OR (state = 'running' AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
    ) NOT VALID,
    DROP CONSTRAINT IF EXISTS queue_jobs_state_check,
    DROP CONSTRAINT IF EXISTS queue_jobs_check;

ALTER TABLE outbox
    ADD CONSTRAINT outbox_state CHECK (
        (state = 'pending' OR state = 'sent' OR state = 'failed')
        AND (lease_owner IS NULL) = (lease_expires_at IS NULL)
    ) NOT VALID,
    DROP CONSTRAINT IF EXISTS outbox_state_check,
    DROP CONSTRAINT IF EXISTS outbox_check;
