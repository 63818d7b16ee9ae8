//! The admin API's OpenAPI document, generated from the handlers' and
//! types' annotations, so that it cannot drift from the code.

use super::{api, dashboard, model, outbox, queue, reprocess};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "idempotent-receiver admin API",
        description = "Views of the stored deliveries and client keys, the operator's actions on queued endpoints' jobs, and the outbox's publications (retry, republish). Reprocessing, job actions and republishes are recorded in the delivery's history with the actor `admin:<token name>` (a named token) or `admin:<token fingerprint>`. Every route needs `Authorization: Bearer <admin token>`."
    ),
    paths(
        api::list,
        api::detail,
        api::stats,
        api::dashboard,
        api::queue_list,
        api::queue_retry,
        api::queue_cancel,
        api::queue_retry_matching,
        api::queue_pause,
        api::queue_resume,
        api::outbox_list,
        api::outbox_retry,
        api::republish,
        reprocess::reprocess,
        api::openapi
    ),
    components(schemas(
        model::DeliveryPage,
        model::DeliveryItem,
        model::ListTotals,
        model::SearchScan,
        model::DeliveryView,
        model::StoredAnswer,
        model::HistoryItem,
        model::Stats,
        model::EndpointStats,
        dashboard::Dashboard,
        dashboard::Latency,
        dashboard::Slot,
        dashboard::EndpointFacts,
        dashboard::QueueDepth,
        dashboard::OutboxDepth,
        queue::QueueListing,
        queue::QueueJob,
        queue::PausedEndpoint,
        queue::BulkRetry,
        queue::PauseState,
        outbox::OutboxListing,
        outbox::Publication,
        outbox::PublisherBacklog,
        outbox::OutboxRetry,
        crate::maintenance::RepublishReport,
        reprocess::Reprocessed,
        crate::maintenance::Republication,
        crate::maintenance::Skipped,
    )),
    modifiers(&BearerToken)
)]
struct AdminApi;

/// Declares the `bearer` security scheme that every path names.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

pub fn document() -> utoipa::openapi::OpenApi {
    AdminApi::openapi()
}
