//! `[publishers.NAME]`: the brokers `publish:NAME` handlers write to. The
//! keys every kind shares are read here; the rest of the table belongs to
//! the kind's own settings (`crate::publishers`), which also resolve the
//! `*_env` variables that carry credentials.

use super::error::{ConfigError, Source};
use crate::environment::Env;
use crate::publishers::{
    BrokerSettings, NatsSettings, PublisherSettings, RabbitmqSettings, RedisSettings,
};
use std::collections::BTreeMap;

pub(super) fn parse(
    raw: &BTreeMap<String, toml::Table>,
    source: Source<'_>,
    env: Env<'_>,
) -> Result<Vec<PublisherSettings>, ConfigError> {
    let mut publishers = Vec::new();
    for (name, table) in raw {
        let key = |field: &str| format!("publishers.{name}.{field}");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(source.invalid(
                &format!("publishers.{name}"),
                "a publisher's name is letters, digits, '-' and '_'",
            ));
        }
        let mut table = table.clone();
        let text = |table: &mut toml::Table, field: &str| -> Result<Option<String>, ConfigError> {
            match table.remove(field) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(source.invalid(&key(field), "expected a string")),
            }
        };
        let kind = text(&mut table, "kind")?.ok_or_else(|| {
            source.invalid(&key("kind"), "missing: \"nats\", \"rabbitmq\" or \"redis\"")
        })?;
        let retry_backoff = text(&mut table, "retry_backoff")?;
        let retry_backoff_max = text(&mut table, "retry_backoff_max")?;
        let max_attempts = match table.remove("max_attempts") {
            None => None,
            Some(toml::Value::Integer(n)) if n > 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            Some(_) => {
                return Err(source.invalid(&key("max_attempts"), "expected a positive integer"));
            }
        };
        let source_template = text(&mut table, "source")?;
        let type_prefix = text(&mut table, "type_prefix")?;
        let invalid = |message: String| source.invalid(&format!("publishers.{name}"), message);
        let broker = match kind.as_str() {
            "nats" => BrokerSettings::Nats(NatsSettings::from_toml(table, env).map_err(invalid)?),
            "rabbitmq" => {
                BrokerSettings::Rabbitmq(RabbitmqSettings::from_toml(table, env).map_err(invalid)?)
            }
            "redis" => {
                BrokerSettings::Redis(RedisSettings::from_toml(table, env).map_err(invalid)?)
            }
            other => {
                return Err(source.invalid(
                    &key("kind"),
                    format!("unknown kind {other:?}: expected \"nats\", \"rabbitmq\" or \"redis\""),
                ));
            }
        };
        let retry_backoff = source.duration(
            &key("retry_backoff"),
            retry_backoff.as_ref(),
            PublisherSettings::DEFAULT_RETRY_BACKOFF,
        )?;
        let retry_backoff_max = source.duration(
            &key("retry_backoff_max"),
            retry_backoff_max.as_ref(),
            PublisherSettings::DEFAULT_RETRY_BACKOFF_MAX,
        )?;
        if retry_backoff.is_zero() || retry_backoff_max < retry_backoff {
            return Err(source.invalid(
                &key("retry_backoff_max"),
                "retry_backoff must be above zero and at most retry_backoff_max",
            ));
        }
        publishers.push(PublisherSettings {
            name: name.clone(),
            broker,
            retry_backoff,
            retry_backoff_max,
            max_attempts,
            source: source_template.unwrap_or_else(|| PublisherSettings::DEFAULT_SOURCE.to_owned()),
            type_prefix: type_prefix
                .unwrap_or_else(|| PublisherSettings::DEFAULT_TYPE_PREFIX.to_owned()),
        });
    }
    Ok(publishers)
}
