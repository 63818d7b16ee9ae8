use super::{Event, Handler, HandlerError};
use crate::store::DbConn;
use crate::store::schema::ledger_entries;
use crate::with_conn;
use diesel::ExpressionMethods;
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};
use std::borrow::Cow;

mod amount;
mod shapes;
#[cfg(test)]
mod tests;

use shapes::{Shape, shape_of};

/// Turns payment events into ledger rows: one row per processed delivery, so
/// a double effect would show as a second row.
///
/// Which events are booked, and where each provider keeps the payment id,
/// amount, currency and order id, is the table in `shapes.rs`: the generic
/// `payment.succeeded` / `payment.refunded`, Stripe, Paddle, Adyen, Square,
/// PayPal, Checkout.com, Razorpay, Paystack, Lemon Squeezy, Coinbase
/// Commerce and Braintree. Any other event is left alone (`Ok(None)`).
pub struct Payments;

/// A payment event, whatever the provider called it.
#[derive(Debug, PartialEq, Eq)]
struct Movement<'a> {
    kind: &'static str,
    payment_id: Cow<'a, str>,
    order_id: Option<Cow<'a, str>>,
    amount: i64,
    currency: String,
}

fn rejected(pointers: &[&str], what: &str) -> HandlerError {
    HandlerError::Rejected(format!("`{}` must be {what}", pointers.join("` or `")))
}

/// An identifier: a non-empty string, or a non-negative integer (Paystack's
/// ids are JSON numbers) written out in decimal.
fn id_at<'a>(payload: &'a Value, pointers: &[&str]) -> Option<Cow<'a, str>> {
    pointers.iter().find_map(|p| match payload.pointer(p)? {
        Value::String(s) if !s.is_empty() => Some(Cow::Borrowed(s.as_str())),
        Value::Number(n) if n.is_u64() => Some(Cow::Owned(n.to_string())),
        _ => None,
    })
}

/// Reads a movement. Amounts end up as integers in the currency's minor
/// unit (see `amount`); anything else is refused rather than rounded. Errors
/// name the pointer, never the value: the payload is request-derived.
fn movement<'a>(shape: &Shape, payload: &'a Value) -> Result<Movement<'a>, HandlerError> {
    let currency = payload
        .pointer(shape.currency)
        .and_then(Value::as_str)
        .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()))
        .ok_or_else(|| rejected(&[shape.currency], "a three-letter ISO 4217 code"))?
        .to_ascii_uppercase();
    // The first amount field present is the one meant (Lemon Squeezy's
    // refund has `refunded_amount` besides `total`); a present but invalid
    // one is refused, not skipped.
    let (pointer, value) = shape
        .amount
        .iter()
        .find_map(|p| payload.pointer(p).filter(|v| !v.is_null()).map(|v| (*p, v)))
        .unwrap_or((
            shape.amount.first().copied().unwrap_or_default(),
            &Value::Null,
        ));
    let amount = amount::minor_units(value, shape.units, &currency)
        .map_err(|what| rejected(&[pointer], &what))?;
    let order_id = id_at(payload, shape.order_id);
    if shape.order_required && order_id.is_none() {
        return Err(rejected(shape.order_id, "a non-empty string"));
    }
    Ok(Movement {
        kind: shape.kind.as_str(),
        payment_id: id_at(payload, shape.payment_id)
            .ok_or_else(|| rejected(shape.payment_id, "a non-empty string or an integer"))?,
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
        // A newer event for the same object was already applied: booking
        // this one now would undo or double what followed it.
        if event.stale {
            return Ok(Some(json!({ "skipped": "stale" })));
        }
        let Some(shape) = event
            .event_type
            .as_deref()
            .and_then(|t| shape_of(event.provider, t, &event.payload))
        else {
            return Ok(None);
        };
        let m = movement(shape, &event.payload)?;
        let row = (
            ledger_entries::endpoint.eq(&event.endpoint),
            ledger_entries::delivery_id.eq(&event.delivery_id),
            ledger_entries::kind.eq(m.kind),
            ledger_entries::payment_id.eq(m.payment_id.as_ref()),
            ledger_entries::order_id.eq(m.order_id.as_deref()),
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
