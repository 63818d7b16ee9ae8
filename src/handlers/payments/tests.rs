//! One test per provider, each with a payload from its docs (URL above it).

use super::*;

/// kind, amount, currency, order id
type Read = (String, i64, String, Option<String>);

fn read(provider: &str, event_type: &str, payload: &Value) -> Result<Option<Read>, String> {
    read_all(provider, event_type, payload).map(|m| m.map(|(read, _)| read))
}

/// What `read` says, and the payment id.
fn read_all(
    provider: &str,
    event_type: &str,
    payload: &Value,
) -> Result<Option<(Read, String)>, String> {
    let Some(shape) = shape_of(provider, event_type, payload) else {
        return Ok(None);
    };
    movement(shape, payload)
        .map(|m| {
            let read = (
                m.kind.to_owned(),
                m.amount,
                m.currency,
                m.order_id.map(Cow::into_owned),
            );
            Some((read, m.payment_id.into_owned()))
        })
        .map_err(|e| e.to_string())
}

#[test]
fn a_standard_payment_becomes_a_charge() {
    let payload =
        json!({"data": {"id": "pay_1", "amount": 1250, "currency": "EUR", "order_id": "ord_9"}});
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

/// kind, payment id, amount, currency, order id
type Booked<'a> = (&'a str, &'a str, i64, &'a str, Option<&'a str>);

#[track_caller]
fn assert_booked(provider: &str, event_type: &str, payload: &Value, expected: Booked) {
    let ((kind, amount, currency, order_id), payment_id) = read_all(provider, event_type, payload)
        .expect("the event is read")
        .expect("the event is booked");
    let booked = (
        kind.as_str(),
        payment_id.as_str(),
        amount,
        currency.as_str(),
        order_id.as_deref(),
    );
    assert_eq!(booked, expected, "{provider} {event_type}");
}

#[track_caller]
fn assert_rejected(provider: &str, event_type: &str, payload: &Value, pointer: &str) {
    let refused = read(provider, event_type, payload).expect_err("the event is refused");
    assert!(refused.contains(&format!("`{pointer}`")), "{refused}");
}

/// One item of a standard notification (the verifier hands each item of
/// `notificationItems` over on its own), from
/// https://docs.adyen.com/development-resources/webhooks/webhook-types/#event-codes
/// and the refund webhook of https://docs.adyen.com/online-payments/refund/
fn adyen_item(event_code: &str, success: &str) -> Value {
    json!({
        "additionalData": {"hmacSignature": "+JWKfq4ynALK+FFzGgHnp1jSMQJMBJeb87dlph24sXw="},
        "amount": {"currency": "EUR", "value": 1000},
        "eventCode": event_code,
        "eventDate": "2021-01-01T01:00:00+01:00",
        "merchantAccountCode": "YOUR_MERCHANT_ACCOUNT",
        "merchantReference": "YOUR_MERCHANT_REFERENCE",
        "originalReference": "QFQTPCQ8HXSKGK82",
        "paymentMethod": "visa",
        "pspReference": "JDD6LKT8MBLZNN84",
        "reason": "null",
        "success": success
    })
}

#[test]
fn adyen_books_successful_authorisations_captures_and_refunds_only() {
    let booked = |kind| {
        (
            kind,
            "JDD6LKT8MBLZNN84",
            1000,
            "EUR",
            Some("YOUR_MERCHANT_REFERENCE"),
        )
    };
    let item = |code| adyen_item(code, "true");
    assert_booked(
        "adyen",
        "AUTHORISATION",
        &item("AUTHORISATION"),
        booked("charge"),
    );
    assert_booked("adyen", "CAPTURE", &item("CAPTURE"), booked("charge"));
    assert_booked("adyen", "REFUND", &item("REFUND"), booked("refund"));
    // A refused payment is notified with the same code: recorded, not booked.
    let refused = adyen_item("AUTHORISATION", "false");
    assert_eq!(read("adyen", "AUTHORISATION", &refused), Ok(None));
    // `success` is a string; a boolean is not what Adyen sends.
    let mut boolean = item("AUTHORISATION");
    boolean["success"] = json!(true);
    assert_eq!(read("adyen", "AUTHORISATION", &boolean), Ok(None));
    assert_eq!(
        read("adyen", "CANCELLATION", &item("CANCELLATION")),
        Ok(None)
    );
}

/// https://developer.squareup.com/reference/square/webhooks/payment.updated
fn square_payment(status: &str) -> Value {
    json!({
        "merchant_id": "6SSW7HV8K2ST5",
        "type": "payment.updated",
        "event_id": "6a8f5f28-54a1-4eb0-a98a-3111513fd4fc",
        "created_at": "2020-02-06T22:14:45.749Z",
        "data": {
            "type": "payment",
            "id": "hYy9pRFVxpDsO1FB05SunFWUe9JZY",
            "object": {"payment": {
                "amount_money": {"amount": 100, "currency": "USD"},
                "approved_money": {"amount": 100, "currency": "USD"},
                "created_at": "2020-11-22T21:16:51.086Z",
                "id": "hYy9pRFVxpDsO1FB05SunFWUe9JZY",
                "location_id": "S8GWD5R9QB376",
                "order_id": "03O3USaPaAaFnI6kkwB1JxGgBsUZY",
                "receipt_number": "hYy9",
                "source_type": "CARD",
                "status": status,
                "total_money": {"amount": 100, "currency": "USD"},
                "updated_at": "2020-11-22T21:16:51.198Z",
                "version": 2
            }}
        }
    })
}

#[test]
fn square_books_a_payment_update_only_once_completed() {
    assert_booked(
        "square",
        "payment.updated",
        &square_payment("COMPLETED"),
        (
            "charge",
            "hYy9pRFVxpDsO1FB05SunFWUe9JZY",
            100,
            "USD",
            Some("03O3USaPaAaFnI6kkwB1JxGgBsUZY"),
        ),
    );
    for status in ["APPROVED", "PENDING", "CANCELED", "FAILED"] {
        assert_eq!(
            read("square", "payment.updated", &square_payment(status)),
            Ok(None)
        );
    }
    assert_eq!(
        read("square", "payment.created", &square_payment("COMPLETED")),
        Ok(None)
    );
}

/// The sample events of https://developer.paypal.com/api/rest/webhooks/event-names/#payments
/// (resource as in https://developer.paypal.com/docs/api/payments/v2/#captures_get).
fn paypal_event(event_type: &str, resource: Value) -> Value {
    json!({
        "id": "WH-58D329510W468432D-8HN650336L201105X",
        "event_version": "1.0",
        "create_time": "2019-02-14T21:50:07.940Z",
        "resource_type": "capture",
        "resource_version": "2.0",
        "event_type": event_type,
        "summary": "Payment completed for $ 2.51 USD",
        "resource": resource
    })
}

#[test]
fn paypal_books_captures_and_refunds_from_decimal_strings() {
    let completed = paypal_event(
        "PAYMENT.CAPTURE.COMPLETED",
        json!({
            "id": "42311647XV020574X",
            "amount": {"currency_code": "USD", "value": "2.51"},
            "final_capture": true,
            "seller_receivable_breakdown": {
                "gross_amount": {"currency_code": "USD", "value": "2.51"},
                "paypal_fee": {"currency_code": "USD", "value": "0.37"},
                "net_amount": {"currency_code": "USD", "value": "2.14"}
            },
            "invoice_id": "INV-1",
            "supplementary_data": {"related_ids": {"order_id": "3JE87736C6340852C"}},
            "status": "COMPLETED",
            "create_time": "2019-02-14T21:49:58Z"
        }),
    );
    assert_booked(
        "paypal",
        "PAYMENT.CAPTURE.COMPLETED",
        &completed,
        (
            "charge",
            "42311647XV020574X",
            251,
            "USD",
            Some("3JE87736C6340852C"),
        ),
    );
    let refunded = paypal_event(
        "PAYMENT.CAPTURE.REFUNDED",
        json!({
            "id": "1Y107995YT783435V",
            "amount": {"currency_code": "JPY", "value": "1500"},
            "invoice_id": "INV-2",
            "status": "COMPLETED"
        }),
    );
    assert_booked(
        "paypal",
        "PAYMENT.CAPTURE.REFUNDED",
        &refunded,
        ("refund", "1Y107995YT783435V", 1500, "JPY", Some("INV-2")),
    );
    // Yen have no decimals: "1500.50" cannot be booked without rounding.
    let mut fractional_yen = refunded.clone();
    fractional_yen["resource"]["amount"]["value"] = json!("1500.50");
    assert_rejected(
        "paypal",
        "PAYMENT.CAPTURE.REFUNDED",
        &fractional_yen,
        "/resource/amount/value",
    );
}

/// https://www.checkout.com/docs/workflows/webhook-event-types/payment_captured
/// and .../payment_refunded
fn checkout_event(event_type: &str, amount: i64) -> Value {
    json!({
        "id": "evt_fkfqht6yonme7bk7jawrgzbbxq",
        "source": "gwc_notifier1",
        "type": event_type,
        "timestamp": "2023-05-24T09:12:32.357+00:00",
        "version": "1.0.29",
        "data": {
            "id": "pay_vti5layihapu5bhbn5tjtk6eem",
            "action_id": "act_uqlj3642dyyuroivzdwfg2fysq",
            "reference": "ORD-5023-4E89",
            "amount": amount,
            "processed_on": "2023-05-24T09:12:27.4695512Z",
            "response_code": "10000",
            "response_summary": "Approved",
            "metadata": {"coupon_code": "NY2018", "partner_id": "123989"},
            "currency": "EUR"
        }
    })
}

#[test]
fn checkout_books_captures_and_refunds_in_minor_units() {
    let booked = |kind, amount| {
        (
            kind,
            "pay_vti5layihapu5bhbn5tjtk6eem",
            amount,
            "EUR",
            Some("ORD-5023-4E89"),
        )
    };
    let captured = checkout_event("payment_captured", 20);
    assert_booked(
        "checkout",
        "payment_captured",
        &captured,
        booked("charge", 20),
    );
    let refunded = checkout_event("payment_refunded", 15);
    assert_booked(
        "checkout",
        "payment_refunded",
        &refunded,
        booked("refund", 15),
    );
    let approved = checkout_event("payment_approved", 20);
    assert_eq!(read("checkout", "payment_approved", &approved), Ok(None));
}

#[test]
fn razorpay_books_captured_payments_and_processed_refunds() {
    // https://razorpay.com/docs/webhooks/payments/ (payment.captured)
    let captured = json!({
        "entity": "event",
        "account_id": "acc_BFQ7uQEaa7j2z7",
        "event": "payment.captured",
        "contains": ["payment"],
        "payload": {"payment": {"entity": {
            "id": "pay_DESlfW9H8K9uqM",
            "entity": "payment",
            "amount": 100,
            "currency": "INR",
            "status": "captured",
            "order_id": "order_DESlLckIVRkHWj",
            "method": "netbanking",
            "captured": true,
            "fee": 2,
            "tax": 0
        }}},
        "created_at": 1567674606
    });
    assert_booked(
        "razorpay",
        "payment.captured",
        &captured,
        (
            "charge",
            "pay_DESlfW9H8K9uqM",
            100,
            "INR",
            Some("order_DESlLckIVRkHWj"),
        ),
    );
    // https://razorpay.com/docs/webhooks/refunds/ (refund.processed)
    let processed = json!({
        "entity": "event",
        "account_id": "acc_BFQ7uQEaa7j2z7",
        "event": "refund.processed",
        "contains": ["refund", "payment"],
        "payload": {
            "refund": {"entity": {
                "id": "rfnd_FP8QHiV938haTz",
                "entity": "refund",
                "amount": 500100,
                "currency": "INR",
                "payment_id": "pay_FP8QA6o7yFwNyR",
                "speed_processed": "normal",
                "status": "processed"
            }},
            "payment": {"entity": {
                "id": "pay_FP8QA6o7yFwNyR",
                "amount": 500100,
                "currency": "INR",
                "status": "refunded",
                "order_id": null
            }}
        },
        "created_at": 1597233886
    });
    assert_booked(
        "razorpay",
        "refund.processed",
        &processed,
        ("refund", "pay_FP8QA6o7yFwNyR", 500100, "INR", None),
    );
}

/// https://paystack.com/docs/payments/webhooks/#charge-success
fn paystack_charge() -> Value {
    json!({
        "event": "charge.success",
        "data": {
            "id": 302961,
            "domain": "live",
            "status": "success",
            "reference": "qTPrJoy9Bx",
            "amount": 10000,
            "message": null,
            "gateway_response": "Approved by Financial Institution",
            "paid_at": "2016-09-30T21:10:19.000Z",
            "created_at": "2016-09-30T21:09:56.000Z",
            "channel": "card",
            "currency": "NGN",
            "ip_address": "41.242.49.37",
            "fees": null,
            "customer": {"id": 68324, "email": "bojack@horsinaround.com", "customer_code": "CUS_qo38as2hpsgk2r0"}
        }
    })
}

#[test]
fn paystack_books_a_successful_charge_by_reference_or_numeric_id() {
    let charge = paystack_charge();
    assert_booked(
        "paystack",
        "charge.success",
        &charge,
        ("charge", "qTPrJoy9Bx", 10000, "NGN", None),
    );
    let mut unreferenced = charge.clone();
    unreferenced["data"]["reference"] = json!("");
    assert_booked(
        "paystack",
        "charge.success",
        &unreferenced,
        ("charge", "302961", 10000, "NGN", None),
    );
    // Neither a usable reference nor an integer id: both pointers are named.
    unreferenced["data"]["id"] = json!(3.5);
    assert_rejected(
        "paystack",
        "charge.success",
        &unreferenced,
        "/data/reference` or `/data/id",
    );
}

/// https://docs.lemonsqueezy.com/help/webhooks/example-payloads (the order
/// object of https://docs.lemonsqueezy.com/api/orders)
fn lemonsqueezy_order(event_name: &str, refunded_amount: Value) -> Value {
    json!({
        "meta": {"event_name": event_name, "custom_data": {"customer_id": 25}},
        "data": {
            "type": "orders",
            "id": "1",
            "attributes": {
                "store_id": 1,
                "customer_id": 1,
                "identifier": "104e18a2-d755-4d4b-80c4-a6c1dcbe1c10",
                "order_number": 1,
                "currency": "USD",
                "currency_rate": "1.0000",
                "subtotal": 999,
                "discount_total": 0,
                "tax": 200,
                "total": 1199,
                "refunded_amount": refunded_amount,
                "status": "paid",
                "refunded": false
            }
        }
    })
}

#[test]
fn lemonsqueezy_books_orders_and_the_refunded_amount() {
    let order = Some("104e18a2-d755-4d4b-80c4-a6c1dcbe1c10");
    let created = lemonsqueezy_order("order_created", json!(0));
    assert_booked(
        "lemonsqueezy",
        "order_created",
        &created,
        ("charge", "1", 1199, "USD", order),
    );
    let partial = lemonsqueezy_order("order_refunded", json!(100));
    assert_booked(
        "lemonsqueezy",
        "order_refunded",
        &partial,
        ("refund", "1", 100, "USD", order),
    );
    // Without `refunded_amount` the whole order was refunded.
    let mut whole = lemonsqueezy_order("order_refunded", Value::Null);
    assert_booked(
        "lemonsqueezy",
        "order_refunded",
        &whole,
        ("refund", "1", 1199, "USD", order),
    );
    whole["data"]["attributes"]["refunded_amount"] = json!("1.00");
    assert_rejected(
        "lemonsqueezy",
        "order_refunded",
        &whole,
        "/data/attributes/refunded_amount",
    );
}

/// https://docs.cdp.coinbase.com/commerce/api-arcitecture/webhooks-fields
#[test]
fn coinbase_commerce_books_a_confirmed_charge_in_its_local_price() {
    let confirmed = json!({
        "attempt_number": 1,
        "event": {
            "api_version": "2018-03-22",
            "created_at": "2023-08-30T19:29:20Z",
            "data": {
                "id": "2aee9dd1-67b8-43ef-8dfe-977959850f27",
                "code": "XA6G6ZFR",
                "pricing": {
                    "local": {"amount": "1.00", "currency": "USD"},
                    "settlement": {"amount": "1", "currency": "USDC"}
                },
                "metadata": {"name": "Bobby Axlerod", "email": "bobby@axecapital.com"},
                "pricing_type": "fixed_price"
            },
            "id": "a3d0f7c6-3b8a-4c46-8c9a-1f9e8a0f2b10",
            "resource": "event",
            "type": "charge:confirmed"
        },
        "id": "f2c5b2a6-4d6b-4f4e-9f53-2c8e4f7d1a77",
        "scheduled_for": "2023-08-30T19:29:20Z"
    });
    let booked = ("charge", "XA6G6ZFR", 100, "USD", None);
    assert_booked("coinbase-commerce", "charge:confirmed", &confirmed, booked);
    assert_eq!(
        read("coinbase-commerce", "charge:pending", &confirmed),
        Ok(None)
    );
}

/// `_transaction_settled_sample_xml` of Braintree's SDK
/// (https://github.com/braintree/braintree_ruby/blob/master/lib/braintree/webhook_testing_gateway.rb),
/// as the verifier hands it over: root dropped, names kept, leaves as text.
fn braintree_settled(transaction_type: &str) -> Value {
    json!({
        "timestamp": "2026-01-01T00:00:00Z",
        "kind": "transaction_settled",
        "subject": {"transaction": {
            "id": "my_id",
            "status": "settled",
            "type": transaction_type,
            "currency-iso-code": "USD",
            "amount": "100.00",
            "order-id": "o1",
            "refunded-transaction-id": "original_id",
            "merchant-account-id": "ogaotkivejpfayqfeaimuktty",
            "payment-instrument-type": "us_bank_account",
            "us-bank-account": {
                "routing-number": "123456789",
                "last-4": "1234",
                "account-type": "checking",
                "account-holder-name": "Dan Schulman"
            }
        }}
    })
}

#[test]
fn braintree_books_a_settled_sale_as_a_charge_and_a_settled_credit_as_a_refund() {
    let sale = braintree_settled("sale");
    assert_booked(
        "braintree",
        "transaction_settled",
        &sale,
        ("charge", "my_id", 10000, "USD", Some("o1")),
    );
    // The lead's minimal shape, without `type`, is a sale too.
    let minimal = json!({"kind": "transaction_settled", "subject": {"transaction": {
        "id": "abc", "amount": "10.00", "currency-iso-code": "USD", "order-id": "o1"}}});
    assert_booked(
        "braintree",
        "transaction_settled",
        &minimal,
        ("charge", "abc", 1000, "USD", Some("o1")),
    );
    let credit = braintree_settled("credit");
    assert_booked(
        "braintree",
        "transaction_settled",
        &credit,
        ("refund", "original_id", 10000, "USD", Some("o1")),
    );
    // The payout of the same sale is not a second charge.
    assert_eq!(read("braintree", "transaction_disbursed", &sale), Ok(None));
    assert_eq!(
        read("braintree", "transaction_settlement_declined", &sale),
        Ok(None)
    );
}

#[test]
fn providers_whose_webhooks_carry_no_amount_are_never_booked() {
    // GoCardless: https://developer.gocardless.com/api-reference/#events-payment-actions
    let gocardless = json!({"id": "EV123", "resource_type": "payments", "action": "confirmed",
        "links": {"payment": "PM123"}});
    // Mollie: https://docs.mollie.com/reference/webhooks (next-gen: entity id only)
    let mollie = json!({"resource": "event", "id": "event_GvJ8WHrp5isUdRub9CJyH", "type": "payment-link.paid",
        "entityId": "pl_qng5gbbv8NAZ5gpM5ZYgx"});
    // Mercado Pago: https://www.mercadopago.com/developers/en/docs/your-integrations/notifications/webhooks
    let mercadopago = json!({"id": 12345, "live_mode": true, "type": "payment", "action": "payment.updated",
        "data": {"id": "999999999"}});
    for (provider, event_type, payload) in [
        ("gocardless", "payments.confirmed", gocardless),
        ("mollie", "payment-link.paid", mollie),
        ("mercadopago", "payment.updated", mercadopago),
    ] {
        assert_eq!(read(provider, event_type, &payload), Ok(None), "{provider}");
    }
}
