//! The `idempotent-receiver` command: the commands themselves live in
//! `cli/`, one module each; this is only the process edge.

mod cli;

// Opt-in: 16 % less CPU per PostgreSQL delivery (+9 % `fresh` in the full
// bench, the other scenarios within its noise), but on SQLite a peak RSS of
// 68-74 MiB, past the 64 MiB that glibc's allocator stays under in the
// bench (README: "jemalloc, for PostgreSQL deployments").
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
