ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_entry,
    ADD CONSTRAINT ledger_entries_kind_check CHECK (kind IN ('charge', 'refund')),
    ADD CONSTRAINT ledger_entries_amount_check CHECK (amount > 0);

ALTER TABLE deliveries
    DROP CONSTRAINT deliveries_state,
    ADD CONSTRAINT deliveries_status_check CHECK (status IN ('in_progress', 'completed')),
    ADD CONSTRAINT deliveries_check CHECK (status <> 'completed' OR (response_status IS NOT NULL AND response_body IS NOT NULL AND completed_at IS NOT NULL)),
    ADD CONSTRAINT deliveries_check1 CHECK (status <> 'in_progress' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL));
