use super::{Event, Handler, HandlerError};
use crate::store::DbConn;
use crate::store::schema::ledger_entries;
use crate::with_conn;
use diesel::ExpressionMethods;
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

/// Turns payment events into ledger rows: one row per processed delivery, so
/// a double effect would show as a second row.
pub struct Payments;

/// A payment event, whatever the provider called it.
#[derive(Debug, PartialEq, Eq)]
struct Movement<'a> {
    kind: &'static str,
    payment_id: &'a str,
    order_id: &'a str,
    amount: i64,
    currency: &'a str,
}

/// The kind of ledger movement an event type means, if any.
fn kind_of(event_type: &str) -> Option<&'static str> {
    match event_type {
        "payment.succeeded" => Some("charge"),
        "payment.refunded" => Some("refund"),
        _ => None,
    }
}

/// Reads `data.{id, amount, currency, order_id}`. Amounts are integers in the
/// currency's minor unit; anything else is refused rather than rounded.
fn movement<'a>(kind: &'static str, payload: &'a Value) -> Result<Movement<'a>, HandlerError> {
    let data = payload
        .get("data")
        .ok_or_else(|| HandlerError::Rejected("the event has no `data` object".into()))?;
    let text = |field: &str| {
        data.get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                HandlerError::Rejected(format!("`data.{field}` must be a non-empty string"))
            })
    };
    let amount = data
        .get("amount")
        .and_then(Value::as_i64)
        .filter(|a| *a > 0)
        .ok_or_else(|| {
            HandlerError::Rejected("`data.amount` must be a positive integer in minor units".into())
        })?;
    let currency = text("currency")?;
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HandlerError::Rejected(
            "`data.currency` must be a three-letter ISO 4217 code".into(),
        ));
    }
    Ok(Movement {
        kind,
        payment_id: text("id")?,
        order_id: text("order_id")?,
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
        let Some(kind) = event.event_type.as_deref().and_then(kind_of) else {
            return Ok(None);
        };
        let m = movement(kind, &event.payload)?;
        let row = (
            ledger_entries::endpoint.eq(&event.endpoint),
            ledger_entries::delivery_id.eq(&event.delivery_id),
            ledger_entries::kind.eq(m.kind),
            ledger_entries::payment_id.eq(m.payment_id),
            ledger_entries::order_id.eq(m.order_id),
            ledger_entries::amount.eq(m.amount),
            ledger_entries::currency.eq(m.currency),
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

    #[test]
    fn a_well_formed_payment_becomes_a_movement() {
        let payload = json!({"data": {"id": "pay_1", "amount": 1250, "currency": "EUR", "order_id": "ord_9"}});
        assert_eq!(
            movement("charge", &payload).unwrap(),
            Movement {
                kind: "charge",
                payment_id: "pay_1",
                order_id: "ord_9",
                amount: 1250,
                currency: "EUR"
            }
        );
    }

    #[test]
    fn fractional_negative_or_missing_amounts_are_rejected() {
        for amount in [json!(12.5), json!(-3), json!(0), json!("100"), Value::Null] {
            let payload =
                json!({"data": {"id": "p", "amount": amount, "currency": "EUR", "order_id": "o"}});
            assert!(matches!(
                movement("charge", &payload),
                Err(HandlerError::Rejected(_))
            ));
        }
    }

    #[test]
    fn only_payment_event_types_move_money() {
        assert_eq!(kind_of("payment.succeeded"), Some("charge"));
        assert_eq!(kind_of("payment.refunded"), Some("refund"));
        assert_eq!(kind_of("customer.created"), None);
    }
}
