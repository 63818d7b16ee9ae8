//! `embed_migrations!` reads `migrations/` at compile time, but cargo does
//! not know that: a migration added without touching a source file would
//! leave the binary embedding the old set (and a test template built from
//! it). Watching the folder rebuilds the crate when a migration changes.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
