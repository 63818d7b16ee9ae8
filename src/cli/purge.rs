//! `purge`: one pass of the retention purge, as `serve` runs it in the
//! background.

use super::progress::Progress;
use idempotent_receiver::config::Settings;
use idempotent_receiver::maintenance::{self, PurgeOptions, PurgeReport, RetentionPolicy};
use idempotent_receiver::startup;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Use this retention for every key, instead of the configured ones (e.g. 72h, 30m).
    #[arg(long, value_name = "DURATION", value_parser = parse_retention)]
    older_than: Option<Duration>,
}

/// `--older-than`: a duration, never zero — zero would forget every key at
/// once, live idempotency included.
fn parse_retention(text: &str) -> Result<Duration, String> {
    match idempotent_receiver::duration_text::parse_duration(text)? {
        zero if zero.is_zero() => {
            Err("0 would delete every key; give a retention such as 72h".into())
        }
        retention => Ok(retention),
    }
}

pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let store = startup::open_store(settings).await?;
    let policy = match args.older_than {
        Some(retention) => RetentionPolicy::uniform(retention),
        None => settings.retention_policy(),
    };
    let options = PurgeOptions {
        dry_run: args.dry_run,
        ..PurgeOptions::from_settings(&settings.purge)
    };
    let progress = Progress::start("purge", None);
    let mut shown = |report: &PurgeReport| {
        let rows = report.total() + report.publications;
        progress.step(
            rows,
            &format!("batch {}: {rows} row(s) deleted so far", report.batches),
        );
    };
    let outcome = maintenance::purge_reporting(&store, &policy, &options, &mut shown).await;
    progress.finish();
    match outcome {
        Ok(report) => {
            print!("{report}");
            Ok(())
        }
        Err(error) => {
            // What was deleted before the failure is committed: say so.
            print!("{}", error.report);
            Err(error.into())
        }
    }
}
