//! The `idempotent-receiver` command: the commands themselves live in
//! `cli/`, one module each; this is only the process edge.

/// jemalloc's compiled-in options (see `MALLOC_CONF`), as a literal so that
/// `--help` (cli) names the very string the binary runs with.
#[cfg(feature = "jemalloc")]
macro_rules! jemalloc_options {
    () => {
        "narenas:1,dirty_decay_ms:200,muzzy_decay_ms:0"
    };
}

mod cli;

// jemalloc by default: a sixth less CPU per PostgreSQL delivery than
// glibc's allocator, which brings `fresh` to #15's 0.8 x line on Intel
// machines where glibc's leaves it at 0.74-0.76 x, and more throughput on
// SQLite. Build with `--no-default-features` for the
// system's allocator (README: "The allocator: jemalloc, tuned for memory").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, compiled in: read by jemalloc at its first
/// allocation, before `main`, and extended or overridden by the
/// `_RJEM_MALLOC_CONF` environment variable. With its defaults (four arenas
/// per core, dirty pages kept 10 s) a SQLite server's peak RSS in the bench
/// was 66-68 MiB, past #15's 64 MiB; one arena, dirty pages returned after
/// 200 ms and muzzy ones at once bring it to 61-63 MiB, beside glibc's
/// 57-62, and keep the CPU saved. A many-core machine under heavy load may
/// want more arenas: `_RJEM_MALLOC_CONF=narenas:8`.
#[cfg(feature = "jemalloc")]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(concat!(jemalloc_options!(), "\0").as_ptr().cast());

/// The `const char *` jemalloc reads its compiled-in options from (its
/// `malloc_conf`, prefixed `_rjem_` in tikv-jemalloc-sys's build, and weak
/// there, so that this definition wins at link time).
#[cfg(feature = "jemalloc")]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// Safety: the pointer is to a `'static` NUL-terminated literal, never
// written.
#[cfg(feature = "jemalloc")]
unsafe impl Sync for MallocConf {}

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
