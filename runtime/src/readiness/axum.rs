//! The `/health/ready` endpoint for axum: 200 when ready, 503 when not,
//! with the [`Readiness`] as a JSON body either way.
//!
//! Route it after any `resilient::tower::ResilienceLayer` (a `.layer`
//! wraps only the routes before it): the layer refuses every new request
//! while a graceful shutdown drains, so a probe behind it gets the layer's
//! 503 (problem+json) rather than this body.
//!
//! ```no_run
//! # async fn serve() {
//! # async fn charge() {}
//! let app: axum::Router = axum::Router::new()
//!     .route("/charges", axum::routing::post(charge))
//!     // .layer(resilient::tower::ResilienceLayer::new()) goes here
//!     .route(
//!         "/health/ready",
//!         resilient::readiness::axum::route(resilient::Registry::global().clone()),
//!     );
//! # }
//! ```

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;

use super::Readiness;
use crate::Registry;

/// A `GET` route answering with `registry`'s readiness.
pub fn route<S>(registry: Registry) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    axum::routing::get(move || {
        let readiness = registry.readiness();
        async move { readiness }
    })
}

/// A handler answering with the global registry's readiness, for
/// `.route("/health/ready", get(resilient::readiness::axum::ready))`.
pub async fn ready() -> Readiness {
    Registry::global().readiness()
}

/// 200 OK when ready, else 503 Service Unavailable; the body is the
/// readiness as JSON.
impl IntoResponse for Readiness {
    fn into_response(self) -> Response {
        let status = if self.ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, axum::Json(self)).into_response()
    }
}
