use super::error::{ConfigError, Source};
use crate::maintenance::PurgeSettings;

/// `purge_interval`, `purge_batch` and `purge_pause` as written. The batch
/// is signed, so that a negative value is refused naming the key rather
/// than as a type error at a byte offset.
pub(super) fn parse(
    interval: Option<&String>,
    batch: Option<i64>,
    pause: Option<&String>,
    source: Source<'_>,
) -> Result<PurgeSettings, ConfigError> {
    let interval = source.duration("purge_interval", interval, PurgeSettings::DEFAULT_INTERVAL)?;
    let batch = match batch {
        None => PurgeSettings::DEFAULT_BATCH,
        Some(batch) => match usize::try_from(batch) {
            Ok(batch) if (1..=PurgeSettings::MAX_BATCH).contains(&batch) => batch,
            _ => {
                return Err(source.invalid(
                    "purge_batch",
                    format!("{batch} is not between 1 and {}", PurgeSettings::MAX_BATCH),
                ));
            }
        },
    };
    Ok(PurgeSettings {
        interval: Some(interval).filter(|interval| !interval.is_zero()),
        batch,
        pause: source.duration("purge_pause", pause, PurgeSettings::DEFAULT_PAUSE)?,
    })
}
