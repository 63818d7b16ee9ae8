//! Reading environment variables through a parameter, so that settings can
//! be parsed in tests without touching the process environment.
//!
//! A leaf: it imports nothing of the product.

/// Looks a variable up; `None` when it is unset or empty.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, with an empty variable treated as unset.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}
