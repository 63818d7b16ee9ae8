//! The `idempotent-receiver` command: the commands themselves live in
//! `cli/`, one module each; this is only the process edge.

mod cli;

// Opt-in: measured at 8-29 % more throughput, but 8-12 MiB more peak RSS
// than glibc's allocator on SQLite, which the default build keeps under
// #15's 64 MiB (README: "jemalloc, for PostgreSQL deployments").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match cli::run().await {
        Ok(code) => code,
        Err(error) => {
            // One line with the cause chain: an operator reads this, not a
            // backtrace.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
