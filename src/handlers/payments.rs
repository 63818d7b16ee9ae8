use super::{Event, Handler, HandlerError};
use crate::store::DbConn;
use crate::store::schema::ledger_entries;
use crate::with_conn;
use diesel::ExpressionMethods;
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

/// Turns payment events into ledger rows: one row per processed delivery, so
/// a double effect would show as a second row.
///
/// | provider | event type | fields |
/// |---|---|---|
/// | any | `payment.succeeded` / `payment.refunded` | `data.{id, amount, currency, order_id}` |
/// | `stripe` | `payment_intent.succeeded` | `data.object.{id, amount_received, currency, metadata.order_id}` |
/// | `stripe` | `charge.refunded` | `data.object.{payment_intent, amount_refunded, currency, metadata.order_id}` |
/// | `paddle` | `transaction.completed` | `data.{id, currency_code, details.totals.grand_total, custom_data.order_id}` |
pub struct Payments;

/// A payment event, whatever the provider called it.
#[derive(Debug, PartialEq, Eq)]
struct Movement<'a> {
    kind: &'static str,
    payment_id: &'a str,
    order_id: Option<&'a str>,
    amount: i64,
    currency: String,
}

/// Where a provider's event keeps each field (JSON pointers).
struct Shape {
    kind: &'static str,
    payment_id: &'static str,
    amount: &'static str,
    currency: &'static str,
    order_id: &'static str,
    order_required: bool,
}

fn shape_of(provider: &str, event_type: &str) -> Option<Shape> {
    let standard = |kind| Shape {
        kind,
        payment_id: "/data/id",
        amount: "/data/amount",
        currency: "/data/currency",
        order_id: "/data/order_id",
        order_required: true,
    };
    match (provider, event_type) {
        (_, "payment.succeeded") => Some(standard("charge")),
        (_, "payment.refunded") => Some(standard("refund")),
        ("stripe", "payment_intent.succeeded") => Some(Shape {
            kind: "charge",
            payment_id: "/data/object/id",
            amount: "/data/object/amount_received",
            currency: "/data/object/currency",
            order_id: "/data/object/metadata/order_id",
            order_required: false,
        }),
        ("stripe", "charge.refunded") => Some(Shape {
            kind: "refund",
            payment_id: "/data/object/payment_intent",
            amount: "/data/object/amount_refunded",
            currency: "/data/object/currency",
            order_id: "/data/object/metadata/order_id",
            order_required: false,
        }),
        ("paddle", "transaction.completed") => Some(Shape {
            kind: "charge",
            payment_id: "/data/id",
            amount: "/data/details/totals/grand_total",
            currency: "/data/currency_code",
            order_id: "/data/custom_data/order_id",
            order_required: false,
        }),
        _ => None,
    }
}

/// Reads a movement. Amounts are integers in the currency's minor unit
/// (Paddle sends them as decimal strings); anything else is refused rather
/// than rounded.
fn movement<'a>(shape: &Shape, payload: &'a Value) -> Result<Movement<'a>, HandlerError> {
    let rejected =
        |pointer: &str, what: &str| HandlerError::Rejected(format!("`{pointer}` must be {what}"));
    let text = |pointer: &'static str| {
        payload
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let amount = match payload.pointer(shape.amount) {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    }
    .filter(|a| *a > 0)
    .ok_or_else(|| rejected(shape.amount, "a positive integer in minor units"))?;
    let currency = text(shape.currency)
        .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()))
        .ok_or_else(|| rejected(shape.currency, "a three-letter ISO 4217 code"))?
        .to_ascii_uppercase();
    let order_id = text(shape.order_id);
    if shape.order_required && order_id.is_none() {
        return Err(rejected(shape.order_id, "a non-empty string"));
    }
    Ok(Movement {
        kind: shape.kind,
        payment_id: text(shape.payment_id)
            .ok_or_else(|| rejected(shape.payment_id, "a non-empty string"))?,
        order_id,
        amount,
        currency,
    })
}

#[async_trait::async_trait(?Send)]
impl Handler for Payments {
    async fn handle(
        &self,
        event: &Event,
        conn: &mut DbConn,
    ) -> Result<Option<Value>, HandlerError> {
        let Some(shape) = event
            .event_type
            .as_deref()
            .and_then(|t| shape_of(event.provider, t))
        else {
            return Ok(None);
        };
        let m = movement(&shape, &event.payload)?;
        let row = (
            ledger_entries::endpoint.eq(&event.endpoint),
            ledger_entries::delivery_id.eq(&event.delivery_id),
            ledger_entries::kind.eq(m.kind),
            ledger_entries::payment_id.eq(m.payment_id),
            ledger_entries::order_id.eq(m.order_id),
            ledger_entries::amount.eq(m.amount),
            ledger_entries::currency.eq(&m.currency),
            ledger_entries::created_at.eq(event.received_at),
        );
        let id: i64 = with_conn!(conn, |c| {
            diesel::insert_into(ledger_entries::table)
                .values(row)
                .returning(ledger_entries::id)
                .get_result(c)
                .await
        })?;
        Ok(Some(json!({ "ledger_entry_id": id, "kind": m.kind })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kind, amount, currency, order id
    type Read = (String, i64, String, Option<String>);

    fn read(provider: &str, event_type: &str, payload: &Value) -> Result<Option<Read>, String> {
        let Some(shape) = shape_of(provider, event_type) else {
            return Ok(None);
        };
        movement(&shape, payload)
            .map(|m| {
                Some((
                    m.kind.to_owned(),
                    m.amount,
                    m.currency,
                    m.order_id.map(str::to_owned),
                ))
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_standard_payment_becomes_a_charge() {
        let payload = json!({"data": {"id": "pay_1", "amount": 1250, "currency": "EUR", "order_id": "ord_9"}});
        assert_eq!(
            read("standard-webhooks", "payment.succeeded", &payload),
            Ok(Some((
                "charge".into(),
                1250,
                "EUR".into(),
                Some("ord_9".into())
            )))
        );
    }

    #[test]
    fn fractional_negative_or_missing_amounts_are_rejected() {
        for amount in [json!(12.5), json!(-3), json!(0), json!("1.50"), Value::Null] {
            let payload =
                json!({"data": {"id": "p", "amount": amount, "currency": "EUR", "order_id": "o"}});
            assert!(read("standard-webhooks", "payment.succeeded", &payload).is_err());
        }
    }

    #[test]
    fn a_stripe_payment_intent_and_refund_are_read_from_the_event_object() {
        let succeeded = json!({"data": {"object": {"id": "pi_1", "amount_received": 2000, "currency": "usd", "metadata": {"order_id": "o_7"}}}});
        assert_eq!(
            read("stripe", "payment_intent.succeeded", &succeeded),
            Ok(Some((
                "charge".into(),
                2000,
                "USD".into(),
                Some("o_7".into())
            )))
        );
        let refunded = json!({"data": {"object": {"id": "ch_1", "payment_intent": "pi_1", "amount_refunded": 500, "currency": "usd", "metadata": {}}}});
        assert_eq!(
            read("stripe", "charge.refunded", &refunded),
            Ok(Some(("refund".into(), 500, "USD".into(), None)))
        );
    }

    #[test]
    fn a_paddle_transaction_reads_its_amount_from_a_decimal_string() {
        let completed = json!({"data": {"id": "txn_1", "currency_code": "EUR", "details": {"totals": {"grand_total": "1999"}}, "custom_data": {"order_id": "o_1"}}});
        assert_eq!(
            read("paddle", "transaction.completed", &completed),
            Ok(Some((
                "charge".into(),
                1999,
                "EUR".into(),
                Some("o_1".into())
            )))
        );
    }

    #[test]
    fn only_payment_event_types_move_money() {
        assert_eq!(read("stripe", "customer.created", &json!({})), Ok(None));
        assert_eq!(read("github", "push", &json!({})), Ok(None));
        assert_eq!(
            read("paddle", "payment_intent.succeeded", &json!({})),
            Ok(None)
        );
    }
}
