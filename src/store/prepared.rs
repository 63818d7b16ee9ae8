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
use diesel::query_builder::{AstPass, Query, QueryBuilder, QueryFragment, QueryId};
use diesel::result::QueryResult;
use std::marker::PhantomData;
use std::sync::OnceLock;

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

/// Where a statement whose SQL text never varies keeps that text, one per
/// backend: a `static` that [`fixed_statement!`](crate::fixed_statement)
/// declares with the statement's marker.
#[derive(Debug)]
pub struct SqlText {
    pg: OnceLock<Box<str>>,
    sqlite: OnceLock<Box<str>>,
}

impl SqlText {
    pub const fn new() -> SqlText {
        SqlText {
            pg: OnceLock::new(),
            sqlite: OnceLock::new(),
        }
    }
}

impl Default for SqlText {
    fn default() -> Self {
        SqlText::new()
    }
}

/// The backends a [`SqlText`] has a place for.
pub trait TextSlot: Backend<QueryBuilder: Default> + Default {
    fn slot(text: &SqlText) -> &OnceLock<Box<str>>;
}

impl TextSlot for diesel::pg::Pg {
    fn slot(text: &SqlText) -> &OnceLock<Box<str>> {
        &text.pg
    }
}

impl TextSlot for diesel::sqlite::Sqlite {
    fn slot(text: &SqlText) -> &OnceLock<Box<str>> {
        &text.sqlite
    }
}

/// A statement whose SQL text never varies: a marker type that owns the
/// place its text is kept in and names the statement in the connection's
/// cache. Declared with [`fixed_statement!`](crate::fixed_statement), one
/// per statement.
pub trait FixedStatement: 'static {
    fn text() -> &'static SqlText;
}

/// Declares a [`FixedStatement`] marker with its own [`SqlText`].
#[macro_export]
macro_rules! fixed_statement {
    ($(#[$meta:meta])* $vis:vis $name:ident) => {
        $(#[$meta])*
        $vis struct $name;
        impl $crate::store::FixedStatement for $name {
            fn text() -> &'static $crate::store::SqlText {
                static TEXT: $crate::store::SqlText = $crate::store::SqlText::new();
                &TEXT
            }
        }
    };
}

/// `query`, the statement `S`: prepared like [`Prepared`], its SQL text
/// built once per backend and process and then copied from `S`'s
/// [`SqlText`], and cached under `S`'s type rather than under its text.
///
/// diesel-async builds every statement's text on every execution, on both
/// backends (a walk over the query's syntax tree that quotes each
/// identifier a character at a time), and a statement without a static
/// query id is then looked up in PostgreSQL's statement cache by hashing
/// that text. For the statements of a fresh delivery the two were about a
/// tenth of the receiver's instructions. The binds are still collected from
/// `query` on every execution; only the text is kept.
///
/// For statements whose text depends on nothing but their type: no
/// `Option` that an insert writes as `DEFAULT` or a changeset skips
/// (`treat_none_as_default_value = false`, `treat_none_as_null = true`),
/// no list whose length varies. Debug builds (the tests) build the text
/// anew on every execution and panic if it differs from the kept one, which
/// also catches one marker used for two statements. Top-level statements
/// only: the kept text numbers its PostgreSQL placeholders from `$1`.
pub struct FixedText<S, Q> {
    query: Q,
    statement: PhantomData<fn() -> S>,
}

impl<S: FixedStatement, Q> FixedText<S, Q> {
    pub fn new(query: Q) -> FixedText<S, Q> {
        FixedText {
            query,
            statement: PhantomData,
        }
    }

    /// The statement's SQL text on `DB`, built now if it is not kept yet.
    pub fn sql<DB>(&self) -> QueryResult<&'static str>
    where
        DB: TextSlot,
        Q: QueryFragment<DB>,
    {
        let slot = DB::slot(S::text());
        if let Some(text) = slot.get() {
            #[cfg(debug_assertions)]
            assert_eq!(
                build::<DB, Q>(&self.query)?,
                **text,
                "a FixedText statement's SQL text changed between executions"
            );
            return Ok(text);
        }
        let built = build::<DB, Q>(&self.query)?;
        Ok(slot.get_or_init(|| built.into_boxed_str()))
    }
}

impl<S, Q: std::fmt::Debug> std::fmt::Debug for FixedText<S, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FixedText").field(&self.query).finish()
    }
}

fn build<DB, Q>(query: &Q) -> QueryResult<String>
where
    DB: TextSlot,
    Q: QueryFragment<DB>,
{
    let mut builder = DB::QueryBuilder::default();
    query.to_sql(&mut builder, &DB::default())?;
    Ok(builder.finish())
}

/// Whether `pass` renders SQL text (rather than collecting binds or asking
/// whether the statement may be cached). Diesel does not say; but of all
/// its passes only the rendering one keeps a `skip_from` option, so only
/// there does setting it change what it reads back.
fn renders_sql<DB: Backend>(pass: &mut AstPass<'_, '_, DB>) -> bool {
    let before = pass.should_skip_from();
    pass.skip_from(!before);
    let changed = pass.should_skip_from() != before;
    pass.skip_from(before);
    changed
}

impl<S: FixedStatement, Q> QueryId for FixedText<S, Q> {
    // The marker: one text per marker and backend, checked in debug builds.
    type QueryId = S;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<S, Q, DB> QueryFragment<DB> for FixedText<S, Q>
where
    S: FixedStatement,
    DB: TextSlot,
    Q: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut pass: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        if !renders_sql(&mut pass) {
            return self.query.walk_ast(pass);
        }
        pass.push_sql(self.sql::<DB>()?);
        Ok(())
    }

    fn is_safe_to_cache_prepared(&self, _backend: &DB) -> QueryResult<bool> {
        Ok(true)
    }
}

impl<S: FixedStatement, Q: Query> Query for FixedText<S, Q> {
    type SqlType = Q::SqlType;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::deliveries::dsl;
    use diesel::connection::SimpleConnection;
    use diesel::pg::Pg;
    use diesel::prelude::*;
    use diesel::sqlite::Sqlite;

    fn update<'a>(
        id: &'a str,
        owner: &'a str,
    ) -> impl QueryFragment<Pg> + QueryFragment<Sqlite> + QueryId + Send + 'a {
        diesel::update(dsl::deliveries.find(("demo", id)))
            .filter(dsl::lease_owner.eq(owner))
            .set((
                dsl::status.eq("completed"),
                dsl::attempts.eq(dsl::attempts + 1),
            ))
    }

    /// The kept text is the one diesel renders, and the binds are each
    /// execution's own: `debug_query` renders the text, then walks the
    /// binds.
    #[test]
    fn renders_what_diesel_renders_with_each_executions_binds() {
        crate::fixed_statement!(Update);
        for (id, owner) in [("a", "w1"), ("b", "w2"), ("a", "w1")] {
            let fixed = FixedText::<Update, _>::new(update(id, owner));
            assert_eq!(
                diesel::debug_query::<Pg, _>(&fixed).to_string(),
                diesel::debug_query::<Pg, _>(&update(id, owner)).to_string()
            );
            assert_eq!(
                diesel::debug_query::<Sqlite, _>(&fixed).to_string(),
                diesel::debug_query::<Sqlite, _>(&update(id, owner)).to_string()
            );
        }
        assert_eq!(
            <FixedText<Update, ()> as QueryId>::query_id(),
            Some(std::any::TypeId::of::<Update>()),
            "cached under the marker"
        );
        let pg = Update::text()
            .pg
            .get()
            .expect("kept after the first rendering");
        assert!(pg.contains("$1") && pg.contains("$4"), "{pg}");
        let sqlite = Update::text()
            .sqlite
            .get()
            .expect("kept after the first rendering");
        assert!(sqlite.contains('?') && !sqlite.contains('$'), "{sqlite}");
    }

    /// Records, in each pass over it, whether `renders_sql` said it renders.
    #[derive(Default)]
    struct Probe(std::cell::RefCell<Vec<bool>>);

    impl<DB: Backend> QueryFragment<DB> for Probe {
        fn walk_ast<'b>(&'b self, mut pass: AstPass<'_, 'b, DB>) -> QueryResult<()> {
            self.0.borrow_mut().push(renders_sql(&mut pass));
            pass.push_sql("SELECT 1");
            Ok(())
        }
    }

    impl QueryId for Probe {
        type QueryId = ();
        const HAS_STATIC_QUERY_ID: bool = false;
    }

    /// Only the rendering pass is taken for one: collecting binds, the
    /// cache question, the no-op question and showing binds walk the
    /// statement itself.
    #[test]
    fn only_the_rendering_pass_is_told_apart() {
        let probe = Probe::default();
        let mut sql = diesel::sqlite::SqliteQueryBuilder::new();
        QueryFragment::<Sqlite>::to_sql(&probe, &mut sql, &Sqlite).unwrap();
        assert_eq!(
            sql.finish(),
            "SELECT 1",
            "the probe's pass left the text alone"
        );
        let mut binds = <Sqlite as Backend>::BindCollector::default();
        QueryFragment::<Sqlite>::collect_binds(&probe, &mut binds, &mut (), &Sqlite).unwrap();
        QueryFragment::<Sqlite>::is_safe_to_cache_prepared(&probe, &Sqlite).unwrap();
        QueryFragment::<Sqlite>::is_noop(&probe, &Sqlite).unwrap();
        let mut pg = diesel::pg::PgQueryBuilder::default();
        QueryFragment::<Pg>::to_sql(&probe, &mut pg, &Pg).unwrap();
        let _ = diesel::debug_query::<Pg, _>(&probe).to_string();
        // `debug_query` collects the binds to show before it renders.
        assert_eq!(
            *probe.0.borrow(),
            [true, false, false, false, true, false, true]
        );
    }

    /// Against a real SQLite: the statement runs, prepared, and does what
    /// the unwrapped one does.
    #[test]
    fn runs_on_sqlite_with_each_executions_values() {
        crate::fixed_statement!(Update);
        let mut conn = SqliteConnection::establish(":memory:").unwrap();
        conn.batch_execute(
            "CREATE TABLE deliveries (endpoint TEXT, delivery_id TEXT, status TEXT, \
             attempts INTEGER, lease_owner TEXT, PRIMARY KEY (endpoint, delivery_id));
             INSERT INTO deliveries VALUES ('demo', 'a', 'in_progress', 1, 'w1');
             INSERT INTO deliveries VALUES ('demo', 'b', 'in_progress', 1, 'w2');",
        )
        .unwrap();
        let run = |conn: &mut SqliteConnection, id: &str, owner: &str| {
            let fixed = FixedText::<Update, _>::new(update(id, owner));
            diesel::query_dsl::methods::ExecuteDsl::execute(fixed, conn).unwrap()
        };
        assert_eq!(run(&mut conn, "a", "w1"), 1);
        assert_eq!(run(&mut conn, "b", "w1"), 0, "fenced on the owner");
        assert_eq!(run(&mut conn, "b", "w2"), 1);
        let rows: Vec<(String, String, i32)> = dsl::deliveries
            .select((dsl::delivery_id, dsl::status, dsl::attempts))
            .order(dsl::delivery_id)
            .load(&mut conn)
            .unwrap();
        assert_eq!(
            rows,
            [
                ("a".into(), "completed".into(), 2),
                ("b".into(), "completed".into(), 2)
            ]
        );
    }

    /// A statement whose text varies with its values must not be wrapped;
    /// debug builds (the tests) catch one that is.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "SQL text changed")]
    fn a_text_that_varies_is_caught_in_debug_builds() {
        crate::fixed_statement!(Insert);
        let insert = |event_type: Option<&'static str>| {
            // Insertable's default writes `DEFAULT` for `None`.
            diesel::insert_into(dsl::deliveries).values((
                dsl::endpoint.eq("demo"),
                event_type.map(|t| dsl::event_type.eq(t)),
            ))
        };
        let first = FixedText::<Insert, _>::new(insert(Some("x")));
        let _ = diesel::debug_query::<Sqlite, _>(&first).to_string();
        let second = FixedText::<Insert, _>::new(insert(None));
        let _ = diesel::debug_query::<Sqlite, _>(&second).to_string();
    }
}
