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
    /// Only this event type.
    #[arg(long)]
    event_type: Option<String>,
    /// Only keys received within this long (e.g. 24h), or since an RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Only keys received before this RFC 3339 time, or this long ago.
    #[arg(long)]
    until: Option<String>,
    /// Only delivery ids starting with this (case-sensitive).
    #[arg(long)]
    id_prefix: Option<String>,
    /// Only keys whose verified payload contains this text, ignoring case.
    /// Searches --since..--until (24h back unless --since, 7 days at most),
    /// reading at most --scan-limit keys of it.
    #[arg(long, value_name = "TEXT")]
    search: Option<String>,
    /// With --search: how many keys of the window to read at most (1 to 10000).
    #[arg(long)]
    scan_limit: Option<u32>,
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
        event_type: args.event_type,
        since: args.since,
        until: args.until,
        id_prefix: args.id_prefix,
        q: args.search,
        scan_limit: args.scan_limit.map(|n| n.to_string()),
        cursor: args.cursor,
        limit: Some(args.limit.to_string()),
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
    if !page.rows.is_empty() {
        println!("{}", admin::totals_line(&page));
    }
    if let Some(search) = &page.search {
        if search.capped {
            println!(
                "the search stopped after reading {} keys: older keys of the window were not searched (narrow --since/--until)",
                search.scan_limit
            );
        }
    }
    if let Some(cursor) = page.next_cursor {
        println!("more keys match: --cursor {cursor}");
    }
    Ok(())
}
