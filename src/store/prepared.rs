//! Keeps the hot path's statements in the connection's prepared-statement
//! cache.
//!
//! Diesel refuses to cache every `UPDATE`, every `ON CONFLICT DO UPDATE` and
//! every insert with an optional column: their SQL text can vary with the
//! values (a changeset skips `None`, an insert writes `DEFAULT`), and a query
//! whose variants are unbounded would grow the cache without end. The
//! price is a parse round trip (PostgreSQL) or a `sqlite3_prepare` for each
//! of them on every delivery. The statements wrapped here have a handful of
//! variants each, and uncacheable statements are looked up by their SQL
//! text, so caching them is exact: a variant is its own entry.

use diesel::backend::Backend;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::result::QueryResult;

/// `query`, cached by its SQL text like any other prepared statement.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<Q>(pub Q);

impl<Q> QueryId for Prepared<Q> {
    // No static id: the cache key is the SQL text and the bind types.
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q, DB> QueryFragment<DB> for Prepared<Q>
where
    DB: Backend,
    Q: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    fn is_safe_to_cache_prepared(&self, _backend: &DB) -> QueryResult<bool> {
        Ok(true)
    }
}

impl<Q: Query> Query for Prepared<Q> {
    type SqlType = Q::SqlType;
}
