//! `POST /payments` and `GET /payments/{id}`: the showcase client route. The
//! payment row and the key's completion commit in one transaction.

use crate::client_keys::{Idempotency, IdempotentTx, TenantSource};
use crate::clock::SharedClock;
use crate::log_text::escaped;
use crate::problem::{FieldError, Problem};
use crate::store::schema::payments;
use crate::store::{Store, StoreError};
use crate::with_conn;
use actix_web::dev::ServiceRequest;
use actix_web::http::StatusCode;
use actix_web::http::header::LOCATION;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Serialize, Queryable, Selectable, Insertable)]
#[diesel(table_name = payments)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub struct Payment {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub order_id: String,
    pub amount: i64,
    pub currency: String,
    pub status: String,
    #[serde(skip)]
    pub idempotency_key: Option<String>,
    #[serde(serialize_with = "rfc3339")]
    pub created_at: NaiveDateTime,
}

fn rfc3339<S: serde::Serializer>(at: &NaiveDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(
        &at.and_utc()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

/// Mounts the routes; `idempotency` decides how keys are scoped and checked,
/// and who may read a payment back. `max_body` is `[idempotency]
/// max_body_bytes`: the JSON extractor gets the same limit as the
/// middleware, instead of actix's default (2 MB for JSON, 256 KiB for raw
/// bytes), so that the configured limit is the one in force.
pub fn configure(
    store: Store,
    idempotency: Idempotency,
    max_body: usize,
) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        let tenants = web::Data::new(idempotency.tenant_source().clone());
        let clock = web::Data::new(store.clock().clone());
        cfg.service(
            web::resource("/payments")
                .app_data(web::JsonConfig::default().limit(max_body))
                .app_data(clock)
                .wrap(idempotency.required())
                .route(web::post().to(create)),
        )
        .service(
            web::resource("/payments/{id}")
                .app_data(web::Data::new(store))
                .app_data(tenants)
                .route(web::get().to(show)),
        );
    }
}

/// What a valid request asks for.
#[derive(Debug)]
struct NewPayment {
    order_id: String,
    amount: i64,
    currency: String,
}

/// Validates `{order_id, amount, currency}`; every failing field is named.
/// A body that is not JSON never gets here: the extractor refuses it (400,
/// not stored, see `problem::refuses_request`).
fn validate(body: &Value) -> Result<NewPayment, Problem> {
    let invalid = |errors: Vec<FieldError>| {
        let mut problem = Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation-failed",
            "Validation failed",
            "the payment request is invalid; see errors",
        );
        problem.errors = errors;
        problem
    };
    let Value::Object(fields) = body else {
        return Err(invalid(vec![FieldError {
            field: "",
            message: "the body must be a JSON object",
        }]));
    };
    let mut errors = Vec::new();
    let order_id = fields
        .get("order_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // Control characters are refused on both backends alike: PostgreSQL's
    // text cannot hold NUL (`\u0000`), where SQLite would store it.
    if order_id.is_empty() || order_id.len() > 255 || order_id.chars().any(char::is_control) {
        errors.push(FieldError {
            field: "order_id",
            message: "must be a string of 1 to 255 characters, without control characters",
        });
    }
    let amount = fields
        .get("amount")
        .and_then(Value::as_i64)
        .filter(|a| *a > 0);
    if amount.is_none() {
        errors.push(FieldError {
            field: "amount",
            message: "must be a positive integer in the currency's minor unit",
        });
    }
    let currency = fields
        .get("currency")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        errors.push(FieldError {
            field: "currency",
            message: "must be a three-letter ISO 4217 code, upper case",
        });
    }
    match amount {
        Some(amount) if errors.is_empty() => Ok(NewPayment {
            order_id: order_id.to_owned(),
            amount,
            currency: currency.to_owned(),
        }),
        _ => Err(invalid(errors)),
    }
}

async fn create(
    body: web::Json<Value>,
    tx: IdempotentTx,
    clock: web::Data<SharedClock>,
) -> HttpResponse {
    let new = match validate(&body) {
        Ok(new) => new,
        // Produced after the handler started: stored with the key, so a
        // retry of the same invalid request gets the same 422.
        Err(problem) => return problem.to_response(),
    };
    let payment = Payment {
        id: format!("pay_{}", uuid::Uuid::new_v4().simple()),
        tenant: tx.tenant().map(str::to_owned),
        order_id: new.order_id,
        amount: new.amount,
        currency: new.currency,
        status: "created".to_owned(),
        idempotency_key: tx.key().map(str::to_owned),
        created_at: clock.naive_now(),
    };
    let inserted: Result<usize, StoreError> = async {
        let mut conn = tx.conn().await?;
        Ok(with_conn!(&mut *conn, |c| {
            diesel::insert_into(payments::table)
                .values(&payment)
                .execute(c)
                .await
        })?)
    }
    .await;
    match inserted {
        Ok(_) => HttpResponse::Created()
            .insert_header((LOCATION, format!("/payments/{}", payment.id)))
            .json(&payment),
        Err(error) => {
            tracing::error!(error = %escaped(&error.to_string()), "could not write the payment");
            // A 5xx is never stored: the key is released for the retry.
            if error.is_transient() {
                Problem::unavailable().to_response()
            } else {
                Problem::processing_failed().to_response()
            }
        }
    }
}

/// Reads a payment back. A GET takes no key; one sent is ignored. With
/// tenants configured, a payment is found only by the tenant it was created
/// for (and one created without a tenant only without one), exactly as its
/// key was scoped; another tenant's payment is not found, not forbidden, so
/// that its existence is not told either.
async fn show(
    request: HttpRequest,
    id: web::Path<String>,
    store: web::Data<Store>,
    tenants: web::Data<TenantSource>,
) -> HttpResponse {
    let not_found = || {
        Problem::new(
            StatusCode::NOT_FOUND,
            "payment-not-found",
            "Payment not found",
            format!("no payment with id {:?}", escaped(&id)),
        )
        .to_response()
    };
    // Ids are visible ASCII (`pay_` and hex): anything else cannot be one,
    // and a NUL would make PostgreSQL refuse the query where SQLite answers.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return not_found();
    }
    let found: Result<Option<Payment>, StoreError> = async {
        let mut conn = store.conn().await?;
        Ok(with_conn!(&mut conn, |c| {
            payments::table
                .find(id.as_str())
                .select(Payment::as_select())
                .get_result(c)
                .await
                .optional()
        })?)
    }
    .await;
    let visible = |payment: &Payment| match tenants.as_ref() {
        TenantSource::None => true,
        source => source.of(&ServiceRequest::from_request(request.clone())) == payment.tenant,
    };
    match found {
        Ok(Some(payment)) if visible(&payment) => HttpResponse::Ok().json(payment),
        Ok(_) => not_found(),
        Err(_) => Problem::unavailable().to_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_invalid_field_is_named() {
        let problem = validate(&json!({"order_id":"","amount":12.5,"currency":"eur"})).unwrap_err();
        let fields: Vec<_> = problem.errors.iter().map(|e| e.field).collect();
        assert_eq!(fields, ["order_id", "amount", "currency"]);
        assert_eq!(problem.status, 422);
        assert!(validate(&json!([1])).is_err());
        assert!(validate(&json!({"order_id":"o1","amount":100,"currency":"EUR"})).is_ok());
        let nul =
            validate(&json!({"order_id":"o\u{0}1","amount":100,"currency":"EUR"})).unwrap_err();
        assert_eq!(nul.errors[0].field, "order_id");
    }
}
