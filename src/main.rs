//! The `idempotent-receiver` command: the commands themselves live in
//! `cli/`, one module each; this is only the process edge.

mod cli;

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
