// The Diesel schema shared by both backends (see diesel.toml). The SQLite and
// PostgreSQL migrations declare the same columns with the same Diesel types.

diesel::table! {
    deliveries (endpoint, delivery_id) {
        endpoint -> Text,
        delivery_id -> Text,
        request_hash -> Text,
        status -> Text,
        event_type -> Nullable<Text>,
        response_status -> Nullable<Integer>,
        response_content_type -> Nullable<Text>,
        response_body -> Nullable<Binary>,
        attempts -> Integer,
        lease_owner -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        received_at -> Timestamp,
        completed_at -> Nullable<Timestamp>,
        body_key -> Nullable<Text>,
        response_location -> Nullable<Text>,
        request_body -> Nullable<Binary>,
        replays -> Integer,
    }
}

diesel::table! {
    events (endpoint, delivery_id) {
        endpoint -> Text,
        delivery_id -> Text,
        event_type -> Nullable<Text>,
        payload -> Text,
        recorded_at -> Timestamp,
    }
}

diesel::table! {
    ledger_entries (id) {
        id -> BigInt,
        endpoint -> Text,
        delivery_id -> Text,
        kind -> Text,
        payment_id -> Text,
        order_id -> Nullable<Text>,
        amount -> BigInt,
        currency -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    outbox (id) {
        id -> BigInt,
        publisher -> Text,
        endpoint -> Text,
        delivery_id -> Text,
        message_id -> Text,
        destination -> Text,
        body -> Binary,
        state -> Text,
        attempts -> Integer,
        next_attempt_at -> Timestamp,
        lease_owner -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        last_error -> Nullable<Text>,
        confirmation -> Nullable<Text>,
        received_at -> Timestamp,
        created_at -> Timestamp,
        sent_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    payments (id) {
        id -> Text,
        tenant -> Nullable<Text>,
        order_id -> Text,
        amount -> BigInt,
        currency -> Text,
        status -> Text,
        idempotency_key -> Nullable<Text>,
        created_at -> Timestamp,
    }
}

diesel::table! {
    delivery_history (id) {
        id -> BigInt,
        endpoint -> Text,
        delivery_id -> Text,
        at -> Timestamp,
        kind -> Text,
        actor -> Nullable<Text>,
        detail -> Nullable<Text>,
    }
}

diesel::table! {
    ordering_versions (endpoint, ordering_key) {
        endpoint -> Text,
        ordering_key -> Text,
        event_time -> Timestamp,
    }
}

diesel::table! {
    queue_jobs (endpoint, delivery_id) {
        endpoint -> Text,
        delivery_id -> Text,
        state -> Text,
        attempts -> Integer,
        next_run_at -> Timestamp,
        lease_owner -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        last_error -> Nullable<Text>,
        ordering_key -> Nullable<Text>,
        event_time -> Nullable<Timestamp>,
        received_at -> Timestamp,
        finished_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    queue_pauses (endpoint) {
        endpoint -> Text,
        paused_at -> Timestamp,
        actor -> Nullable<Text>,
    }
}

diesel::table! {
    traffic (endpoint, minute, outcome, bucket) {
        endpoint -> Text,
        minute -> BigInt,
        outcome -> Text,
        bucket -> Integer,
        count -> Integer,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    deliveries,
    delivery_history,
    events,
    ledger_entries,
    ordering_versions,
    outbox,
    payments,
    queue_jobs,
    queue_pauses,
    traffic,
);
