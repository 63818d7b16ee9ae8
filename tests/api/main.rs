//! One test binary for the whole HTTP surface: each module is one capability,
//! and each test body runs on SQLite and on PostgreSQL.

mod helpers;
#[path = "../support/otlp_collector.rs"]
mod otlp_collector;
/// The fixture sources and their test secrets: the `fixtures` command's
/// own, not the library's.
#[path = "../../src/cli/fixtures.rs"]
mod signed_fixtures;
#[path = "../support/test_schema.rs"]
mod test_schema;

mod admin;
mod admin_actions;
mod admin_cli;
mod admin_list;
mod admin_list_cli;
mod admin_login;
mod admin_outbox;
mod admin_queue;
mod bad_input;
mod batches;
mod bench_sql;
mod brokers;
mod browser;
mod browser_actions;
mod browser_dashboard;
mod browser_list;
mod cdp;
mod cli;
mod client_keys;
mod concurrency;
mod dashboard;
mod delivery;
mod failures;
mod fixtures;
mod forward_answer;
mod group_commit;
mod leases;
mod log_injection;
mod observability;
mod one_statement;
mod outage;
mod outbox;
mod outbox_brokers;
mod payment_requests;
mod pg_group_commit;
mod pipeline;
mod pool_lanes;
mod pool_start_up;
mod provider_properties;
mod provider_vectors;
mod providers;
mod purge;
mod queue;
mod queue_metrics;
mod queue_take;
mod replay_cache;
mod row_checks;
mod sdk_interop;
mod server_language;
mod smuggling;
mod sqlite_lock_wait;
mod storm_pool;
mod traces;
mod writer_thread;
mod young_table_plans;
