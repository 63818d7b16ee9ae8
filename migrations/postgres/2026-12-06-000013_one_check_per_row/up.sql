-- One CHECK per row of the fresh path instead of five (issue #15).
--
-- PostgreSQL reads a table's CHECK constraints back from their stored node
-- trees and plans them again on every execution of every INSERT and UPDATE
-- (ExecConstraints: stringToNode, eval_const_expressions), prepared
-- statements included. Under pgbench of the receiver's own statements
-- (bench/fresh.sql) that was 15 % of the backends' CPU: a fresh delivery
-- checks `deliveries` twice (the claim, the completion) and
-- `ledger_entries` once. One expression per table, without the `IN` lists
-- (an array built again on every run), says exactly what the five said:
-- status is NOT NULL, so no part of it is ever NULL, and a row passes only
-- as an in-progress row with its lease or a completed row with its answer.
--
-- NOT VALID: every existing row already met the same rule under the checks
-- replaced here, so the scan would find nothing, and it would hold writes
-- to the table while it ran. New rows and every update are checked all the
-- same. `ALTER TABLE deliveries VALIDATE CONSTRAINT deliveries_state` has
-- PostgreSQL record the rule as validated at any time, without holding up
-- writes.
ALTER TABLE deliveries
    ADD CONSTRAINT deliveries_state CHECK (
        (status = 'in_progress' AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
        OR (status = 'completed' AND response_status IS NOT NULL AND response_body IS NOT NULL AND completed_at IS NOT NULL)
    ) NOT VALID,
    DROP CONSTRAINT IF EXISTS deliveries_status_check,
    DROP CONSTRAINT IF EXISTS deliveries_check,
    DROP CONSTRAINT IF EXISTS deliveries_check1;

ALTER TABLE ledger_entries
    ADD CONSTRAINT ledger_entries_entry CHECK ((kind = 'charge' OR kind = 'refund') AND amount > 0) NOT VALID,
    DROP CONSTRAINT IF EXISTS ledger_entries_kind_check,
    DROP CONSTRAINT IF EXISTS ledger_entries_amount_check;
