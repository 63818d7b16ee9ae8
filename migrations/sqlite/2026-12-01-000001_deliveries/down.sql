DROP TABLE ledger_entries;
DROP TABLE events;
DROP TABLE deliveries;
