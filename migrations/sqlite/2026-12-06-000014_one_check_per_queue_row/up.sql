-- Nothing changes on SQLite: this number merged PostgreSQL's CHECK
-- constraints on `queue_jobs` and `outbox` into one per table, because
-- PostgreSQL reads and plans them again on every INSERT and UPDATE (see the
-- PostgreSQL migration). SQLite compiles a table's CHECKs into a
-- statement's program once, when it is prepared, and changing them would
-- mean rebuilding the table. The rule they enforce is the same on both.
SELECT 1;
