//! `list`: the admin listing, read straight from the database.

use idempotent_receiver::admin;
use idempotent_receiver::config::Settings;
use idempotent_receiver::startup;

#[derive(clap::Args)]
pub struct Args {
    /// Only this endpoint (or client-key scope, e.g. "POST /payments").
    #[arg(long)]
    endpoint: Option<String>,
    /// Only keys in this status: completed or in_progress.
    #[arg(long)]
    status: Option<String>,
    /// Only keys received within this long (e.g. 24h), or since an RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// How many keys at most (1 to 500).
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Continue after a previous page (its next_cursor).
    #[arg(long)]
    cursor: Option<String>,
}

pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let query = admin::ListQuery {
        endpoint: args.endpoint,
        status: args.status,
        since: args.since,
        cursor: args.cursor,
        limit: Some(args.limit.to_string()),
        ..admin::ListQuery::default()
    };
    let request = query.validate(chrono::Utc::now().naive_utc())?;
    let store = startup::open_store(settings).await?;
    let page = admin::fetch_page(&store, &request).await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&admin::DeliveryPage::from(page))?
        );
        return Ok(());
    }
    print!("{}", admin::table(&page.rows));
    if let Some(cursor) = page.next_cursor {
        println!("more keys match: --cursor {cursor}");
    }
    Ok(())
}
