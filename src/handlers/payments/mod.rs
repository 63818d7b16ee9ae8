use super::{Event, Handler, HandlerError, Plan};
use crate::store::schema::ledger_entries;
use crate::store::{BoundTimestamp, DbConn, FixedText, Flight, PlannedLedgerEntry, PlannedWrite};
use crate::with_conn;
use diesel::ExpressionMethods;
use diesel_async::RunQueryDsl;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
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
    pointers
        .iter()
        .find_map(|p| match crate::json_pointer::get(payload, p)? {
            Value::String(s) if !s.is_empty() => Some(Cow::Borrowed(s.as_str())),
            Value::Number(n) if n.is_u64() => Some(Cow::Owned(n.to_string())),
            _ => None,
        })
}

/// Reads a movement. Amounts end up as integers in the currency's minor
/// unit (see `amount`); anything else is refused rather than rounded. Errors
/// name the pointer, never the value: the payload is request-derived.
fn movement<'a>(shape: &Shape, payload: &'a Value) -> Result<Movement<'a>, HandlerError> {
    let currency = crate::json_pointer::get(payload, shape.currency)
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
        .find_map(|p| {
            crate::json_pointer::get(payload, p)
                .filter(|v| !v.is_null())
                .map(|v| (*p, v))
        })
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
        let m = match booked(event)? {
            Booking::Skip(answer) => return Ok(answer),
            Booking::Book(m) => m,
        };
        let id: i64 = with_conn!(conn, |c| ledger_insert!(event, m).get_result(c).await)?;
        Ok(Some(entry(id, &m)))
    }

    fn handle_in_flight<'a>(
        &'a self,
        event: &'a Event,
        flight: Flight<'a>,
    ) -> Option<LocalBoxFuture<'a, Result<Option<Value>, HandlerError>>> {
        Some(
            async move {
                let m = match booked(event)? {
                    Booking::Skip(answer) => return Ok(answer),
                    Booking::Book(m) => m,
                };
                let id: i64 = flight.get_result(ledger_insert!(event, m)).await?;
                Ok(Some(entry(id, &m)))
            }
            .boxed_local(),
        )
    }

    fn plan<'a>(
        &'a self,
        event: &'a Event,
        ledger_id: &mut Option<i64>,
    ) -> Option<Result<Plan<'a>, HandlerError>> {
        let m = match booked(event) {
            Ok(Booking::Book(m)) => m,
            Ok(Booking::Skip(answer)) => {
                return Some(Ok(Plan {
                    write: None,
                    answer,
                }));
            }
            Err(refused) => return Some(Err(refused)),
        };
        // The row `ledger_insert!` writes, with its id drawn beforehand
        // instead of by the column's default.
        let id = ledger_id.take()?;
        let answer = Some(entry(id, &m));
        Some(Ok(Plan {
            write: Some(PlannedWrite::Ledger(PlannedLedgerEntry {
                id,
                kind: m.kind,
                payment_id: m.payment_id,
                order_id: m.order_id,
                amount: m.amount,
                currency: m.currency.into(),
                created_at: event.received_at,
            })),
            answer,
        }))
    }
}

/// What an event means for the ledger: a movement to book, or an answer
/// without one.
enum Booking<'a> {
    Skip(Option<Value>),
    Book(Movement<'a>),
}

fn booked(event: &Event) -> Result<Booking<'_>, HandlerError> {
    // A newer event for the same object was already applied: booking
    // this one now would undo or double what followed it.
    if event.stale {
        return Ok(Booking::Skip(Some(json!({ "skipped": "stale" }))));
    }
    let Some(shape) = event
        .event_type
        .as_deref()
        .and_then(|t| shape_of(event.provider, t, &event.payload))
    else {
        return Ok(Booking::Skip(None));
    };
    Ok(Booking::Book(movement(shape, &event.payload)?))
}

/// The movement's ledger row, returning its id: a macro rather than a
/// function, so that each caller gets it typed for its own connection.
macro_rules! ledger_insert {
    ($event:expr, $m:expr) => {
        FixedText::<LedgerInsert, _>::new(
            diesel::insert_into(ledger_entries::table)
                .values((
                    ledger_entries::endpoint.eq(&$event.endpoint),
                    ledger_entries::delivery_id.eq(&$event.delivery_id),
                    ledger_entries::kind.eq($m.kind),
                    ledger_entries::payment_id.eq($m.payment_id.as_ref()),
                    ledger_entries::order_id.eq($m.order_id.as_deref()),
                    ledger_entries::amount.eq($m.amount),
                    ledger_entries::currency.eq(&$m.currency),
                    ledger_entries::created_at.eq(BoundTimestamp($event.received_at)),
                ))
                .returning(ledger_entries::id),
        )
    };
}
crate::fixed_statement!(LedgerInsert);
use ledger_insert;

fn entry(id: i64, m: &Movement<'_>) -> Value {
    json!({ "ledger_entry_id": id, "kind": m.kind })
}
