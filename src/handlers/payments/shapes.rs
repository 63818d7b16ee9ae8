//! Which events move money, and where each provider keeps the fields: one
//! row per (provider, event type[, condition]). Adding a provider is adding
//! rows here plus a test with a payload from its docs.
//!
//! Providers whose webhooks carry no amount (GoCardless, Mollie, Mercado
//! Pago: they only say that a resource changed and must be asked for it)
//! have no rows on purpose; their events are recorded, never booked.

use super::amount::Units;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Charge,
    Refund,
}

impl Kind {
    /// The `ledger_entries.kind` value (the column's CHECK lists these).
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Kind::Charge => "charge",
            Kind::Refund => "refund",
        }
    }
}

/// When a row applies, beyond its provider and event type.
#[derive(Debug, Clone, Copy)]
pub(super) enum When {
    Always,
    /// The string at the pointer equals the value (a missing field or a
    /// non-string never does).
    Is(&'static str, &'static str),
}

/// Where a provider's event keeps each field (JSON pointers). Where a field
/// lists several pointers, the first one present wins.
#[derive(Debug)]
pub(super) struct Shape {
    /// `None`: any provider (the generic `payment.*` events).
    pub provider: Option<&'static str>,
    pub event_type: &'static str,
    pub when: When,
    pub kind: Kind,
    pub payment_id: &'static [&'static str],
    pub amount: &'static [&'static str],
    pub units: Units,
    pub currency: &'static str,
    pub order_id: &'static [&'static str],
    pub order_required: bool,
}

impl Shape {
    fn applies(&self, provider: &str, event_type: &str, payload: &Value) -> bool {
        self.provider.is_none_or(|p| p == provider)
            && self.event_type == event_type
            && match self.when {
                When::Always => true,
                When::Is(pointer, expected) => {
                    crate::json_pointer::get(payload, pointer).and_then(Value::as_str)
                        == Some(expected)
                }
            }
    }
}

/// The first row that applies to the event, if any.
pub(super) fn shape_of(
    provider: &str,
    event_type: &str,
    payload: &Value,
) -> Option<&'static Shape> {
    SHAPES
        .iter()
        .find(|s| s.applies(provider, event_type, payload))
}

const STANDARD: Shape = Shape {
    provider: None,
    event_type: "payment.succeeded",
    when: When::Always,
    kind: Kind::Charge,
    payment_id: &["/data/id"],
    amount: &["/data/amount"],
    units: Units::Minor,
    currency: "/data/currency",
    order_id: &["/data/order_id"],
    order_required: true,
};

const STRIPE: Shape = Shape {
    provider: Some("stripe"),
    event_type: "payment_intent.succeeded",
    when: When::Always,
    kind: Kind::Charge,
    payment_id: &["/data/object/id"],
    amount: &["/data/object/amount_received"],
    units: Units::Minor,
    currency: "/data/object/currency",
    order_id: &["/data/object/metadata/order_id"],
    order_required: false,
};

/// One notification item; `success` is the string "true" or "false", and a
/// refused authorisation is delivered with the same event code.
const ADYEN: Shape = Shape {
    provider: Some("adyen"),
    event_type: "AUTHORISATION",
    when: When::Is("/success", "true"),
    kind: Kind::Charge,
    payment_id: &["/pspReference"],
    amount: &["/amount/value"],
    units: Units::Minor,
    currency: "/amount/currency",
    order_id: &["/merchantReference"],
    order_required: false,
};

const PAYPAL: Shape = Shape {
    provider: Some("paypal"),
    event_type: "PAYMENT.CAPTURE.COMPLETED",
    when: When::Always,
    kind: Kind::Charge,
    payment_id: &["/resource/id"],
    amount: &["/resource/amount/value"],
    units: Units::Decimal,
    currency: "/resource/amount/currency_code",
    order_id: &[
        "/resource/supplementary_data/related_ids/order_id",
        "/resource/invoice_id",
    ],
    order_required: false,
};

/// The generic fields under `data`, but the order id is the merchant's
/// optional `reference`.
const CHECKOUT: Shape = Shape {
    provider: Some("checkout"),
    event_type: "payment_captured",
    order_id: &["/data/reference"],
    order_required: false,
    ..STANDARD
};

const LEMONSQUEEZY: Shape = Shape {
    provider: Some("lemonsqueezy"),
    event_type: "order_created",
    when: When::Always,
    kind: Kind::Charge,
    payment_id: &["/data/id"],
    amount: &["/data/attributes/total"],
    units: Units::Minor,
    currency: "/data/attributes/currency",
    order_id: &["/data/attributes/identifier"],
    order_required: false,
};

/// The notification XML as JSON, root dropped, element names as sent.
/// Braintree sends transaction notifications only for ACH and SEPA debits,
/// for sales and for refunds (a refund is a transaction of type `credit`).
///
/// `transaction_disbursed` is deliberately absent: it reports the payout of
/// an already settled sale to the merchant's bank, so booking it as well
/// would count the same money twice (and Braintree has deprecated it).
const BRAINTREE: Shape = Shape {
    provider: Some("braintree"),
    event_type: "transaction_settled",
    when: When::Always,
    kind: Kind::Charge,
    payment_id: &["/subject/transaction/id"],
    amount: &["/subject/transaction/amount"],
    units: Units::Decimal,
    currency: "/subject/transaction/currency-iso-code",
    order_id: &["/subject/transaction/order-id"],
    order_required: false,
};

/// Rows are tried in order: a conditional row goes before the
/// unconditional row of the same event.
static SHAPES: &[Shape] = &[
    STANDARD,
    Shape {
        event_type: "payment.refunded",
        kind: Kind::Refund,
        ..STANDARD
    },
    STRIPE,
    Shape {
        event_type: "charge.refunded",
        kind: Kind::Refund,
        payment_id: &["/data/object/payment_intent"],
        amount: &["/data/object/amount_refunded"],
        ..STRIPE
    },
    Shape {
        provider: Some("paddle"),
        event_type: "transaction.completed",
        payment_id: &["/data/id"],
        amount: &["/data/details/totals/grand_total"],
        currency: "/data/currency_code",
        order_id: &["/data/custom_data/order_id"],
        ..STRIPE
    },
    ADYEN,
    Shape {
        event_type: "CAPTURE",
        ..ADYEN
    },
    Shape {
        event_type: "REFUND",
        kind: Kind::Refund,
        ..ADYEN
    },
    Shape {
        provider: Some("square"),
        event_type: "payment.updated",
        when: When::Is("/data/object/payment/status", "COMPLETED"),
        payment_id: &["/data/object/payment/id"],
        amount: &["/data/object/payment/amount_money/amount"],
        currency: "/data/object/payment/amount_money/currency",
        order_id: &["/data/object/payment/order_id"],
        ..CHECKOUT
    },
    PAYPAL,
    Shape {
        event_type: "PAYMENT.CAPTURE.REFUNDED",
        kind: Kind::Refund,
        ..PAYPAL
    },
    CHECKOUT,
    Shape {
        event_type: "payment_refunded",
        kind: Kind::Refund,
        ..CHECKOUT
    },
    Shape {
        provider: Some("razorpay"),
        event_type: "payment.captured",
        payment_id: &["/payload/payment/entity/id"],
        amount: &["/payload/payment/entity/amount"],
        currency: "/payload/payment/entity/currency",
        order_id: &["/payload/payment/entity/order_id"],
        ..CHECKOUT
    },
    Shape {
        provider: Some("razorpay"),
        event_type: "refund.processed",
        kind: Kind::Refund,
        payment_id: &["/payload/refund/entity/payment_id"],
        amount: &["/payload/refund/entity/amount"],
        currency: "/payload/refund/entity/currency",
        // The event also carries the refunded payment's entity.
        order_id: &["/payload/payment/entity/order_id"],
        ..CHECKOUT
    },
    Shape {
        provider: Some("paystack"),
        event_type: "charge.success",
        // `reference` is the merchant's own; `id` is a JSON number.
        payment_id: &["/data/reference", "/data/id"],
        order_id: &[],
        ..CHECKOUT
    },
    LEMONSQUEEZY,
    Shape {
        event_type: "order_refunded",
        kind: Kind::Refund,
        amount: &["/data/attributes/refunded_amount", "/data/attributes/total"],
        ..LEMONSQUEEZY
    },
    Shape {
        provider: Some("coinbase-commerce"),
        event_type: "charge:confirmed",
        payment_id: &["/event/data/code", "/event/data/id"],
        amount: &["/event/data/pricing/local/amount"],
        currency: "/event/data/pricing/local/currency",
        order_id: &[],
        ..PAYPAL
    },
    Shape {
        when: When::Is("/subject/transaction/type", "credit"),
        kind: Kind::Refund,
        payment_id: &[
            "/subject/transaction/refunded-transaction-id",
            "/subject/transaction/id",
        ],
        ..BRAINTREE
    },
    BRAINTREE,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_reachable() {
        // A row shadowed by an earlier unconditional row of the same
        // provider and event would never be used.
        for (i, row) in SHAPES.iter().enumerate() {
            let shadowed = SHAPES[..i].iter().any(|earlier| {
                matches!(earlier.when, When::Always)
                    && earlier.event_type == row.event_type
                    && (earlier.provider.is_none() || earlier.provider == row.provider)
            });
            assert!(!shadowed, "row {i} ({row:?}) is shadowed");
        }
    }

    #[test]
    fn every_field_has_a_pointer() {
        for row in SHAPES {
            assert!(
                !row.payment_id.is_empty() && !row.amount.is_empty(),
                "{row:?}"
            );
            assert!(!row.order_required || !row.order_id.is_empty(), "{row:?}");
            let pointers = row.payment_id.iter().chain(row.amount).chain(row.order_id);
            for p in pointers.chain([&row.currency]) {
                assert!(p.starts_with('/'), "{p} in {row:?}");
            }
        }
    }
}
