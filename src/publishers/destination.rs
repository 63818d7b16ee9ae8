//! Subject, routing-key and stream templates: `{endpoint}`, `{provider}` and
//! `{event_type}` over fixed text, rendered when an outbox row is written.
//!
//! The event type comes from the request (signed, but chosen by the
//! provider), so what it contributes is cleaned for the broker's syntax: a
//! NATS subject keeps its dots as token separators but never gains a
//! wildcard (`*`, `>`), a space or an empty token, and every destination is
//! capped in length.

/// Where an outbox row goes, as a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    parts: Vec<Part>,
    syntax: Syntax,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Endpoint,
    Provider,
    EventType,
}

/// The broker's rules for a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// A NATS subject: dot-separated tokens of printable ASCII without
    /// wildcards or whitespace.
    NatsSubject,
    /// An AMQP 0-9-1 routing key: at most 255 bytes; `.`-separated words
    /// for topic exchanges.
    RoutingKey,
    /// A Redis key: any bytes; capped only.
    RedisKey,
}

/// What stands in for an event type the provider did not name.
pub const UNKNOWN_EVENT_TYPE: &str = "unknown";

/// The longest rendered destination: AMQP's limit for a routing key, and
/// plenty for a subject or a stream name.
const MAX_LEN: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    #[error("unknown placeholder {{{0}}}: expected {{endpoint}}, {{provider}} or {{event_type}}")]
    UnknownPlaceholder(String),
    #[error("unclosed '{{'")]
    Unclosed,
    #[error("the template is empty")]
    Empty,
    #[error("{0:?} is not allowed in a NATS subject")]
    InvalidSubject(char),
}

impl Destination {
    pub fn parse(template: &str, syntax: Syntax) -> Result<Destination, DestinationError> {
        if template.is_empty() && syntax != Syntax::RoutingKey {
            return Err(DestinationError::Empty);
        }
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let close = rest[open..].find('}').ok_or(DestinationError::Unclosed)? + open;
            parts.push(match &rest[open + 1..close] {
                "endpoint" => Part::Endpoint,
                "provider" => Part::Provider,
                "event_type" => Part::EventType,
                other => return Err(DestinationError::UnknownPlaceholder(other.to_owned())),
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        if syntax == Syntax::NatsSubject {
            for part in &parts {
                if let Part::Text(text) = part
                    && let Some(bad) = text.chars().find(|c| !subject_char(*c) && *c != '.')
                {
                    return Err(DestinationError::InvalidSubject(bad));
                }
            }
        }
        Ok(Destination { parts, syntax })
    }

    /// The destination of one event. Endpoint names are already restricted
    /// by the configuration; the event type is cleaned here.
    pub fn render(&self, endpoint: &str, provider: &str, event_type: Option<&str>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Endpoint => out.push_str(&self.clean(endpoint)),
                Part::Provider => out.push_str(&self.clean(provider)),
                Part::EventType => {
                    out.push_str(&self.clean(event_type.unwrap_or(UNKNOWN_EVENT_TYPE)))
                }
            }
        }
        if self.syntax == Syntax::NatsSubject {
            // Placeholders that rendered empty, or a type with leading or
            // doubled dots, must not leave an empty token.
            out = out
                .split('.')
                .filter(|token| !token.is_empty())
                .collect::<Vec<_>>()
                .join(".");
        }
        truncate(&mut out, MAX_LEN);
        out
    }

    fn clean(&self, value: &str) -> String {
        match self.syntax {
            Syntax::NatsSubject => value
                .chars()
                .map(|c| if subject_char(c) || c == '.' { c } else { '_' })
                .collect(),
            Syntax::RoutingKey | Syntax::RedisKey => value
                .chars()
                .map(|c| if c.is_control() { '_' } else { c })
                .collect(),
        }
    }
}

/// A character a NATS subject token may hold: printable ASCII other than
/// the separator, the wildcards and whitespace.
fn subject_char(c: char) -> bool {
    c.is_ascii_graphic() && !matches!(c, '.' | '*' | '>')
}

fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_placeholders() {
        let d =
            Destination::parse("webhooks.{endpoint}.{event_type}", Syntax::NatsSubject).unwrap();
        assert_eq!(
            d.render("stripe", "stripe", Some("payment_intent.succeeded")),
            "webhooks.stripe.payment_intent.succeeded"
        );
        assert_eq!(
            d.render("stripe", "stripe", None),
            "webhooks.stripe.unknown"
        );
    }

    #[test]
    fn a_subject_never_gains_a_wildcard_space_or_empty_token() {
        let d = Destination::parse("webhooks.{event_type}", Syntax::NatsSubject).unwrap();
        assert_eq!(d.render("e", "p", Some("a.*.>")), "webhooks.a._._");
        assert_eq!(
            d.render("e", "p", Some("order created")),
            "webhooks.order_created"
        );
        assert_eq!(d.render("e", "p", Some("..x..")), "webhooks.x");
        assert_eq!(d.render("e", "p", Some("")), "webhooks");
    }

    #[test]
    fn templates_are_checked() {
        assert_eq!(
            Destination::parse("a.{nope}", Syntax::RedisKey),
            Err(DestinationError::UnknownPlaceholder("nope".into()))
        );
        assert_eq!(
            Destination::parse("a.{endpoint", Syntax::RedisKey),
            Err(DestinationError::Unclosed)
        );
        assert_eq!(
            Destination::parse("a.*", Syntax::NatsSubject),
            Err(DestinationError::InvalidSubject('*'))
        );
        assert!(Destination::parse("", Syntax::RoutingKey).is_ok());
    }

    #[test]
    fn long_destinations_are_capped_on_a_char_boundary() {
        let d = Destination::parse("{event_type}", Syntax::RedisKey).unwrap();
        let rendered = d.render("e", "p", Some(&"é".repeat(300)));
        assert!(rendered.len() <= MAX_LEN);
        assert!(rendered.chars().all(|c| c == 'é'));
    }

    #[test]
    fn control_characters_are_replaced() {
        let d = Destination::parse("k:{event_type}", Syntax::RoutingKey).unwrap();
        assert_eq!(d.render("e", "p", Some("a\nb")), "k:a_b");
    }
}
