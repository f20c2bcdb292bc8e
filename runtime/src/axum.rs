//! [axum](::axum_core) handlers return the library's errors as they are:
//! `IntoResponse` for [`resilient::Error`](crate::Error) (a refusal of this
//! service) and for [`resilient::http::Error`](crate::http::Error) (a
//! failed call to this service's own dependency).
//!
//! ```text
//! async fn charge(State(client): State<Client>, body: String)
//!     -> Result<String, resilient::http::Error>   // no glue
//! {
//!     let receipt = call_provider(&client, &body).await?;   // an annotated fn
//!     Ok(receipt)
//! }
//! ```
//!
//! Add `resilient::tower::ResilienceLayer` (feature `tower`)
//! to the router so the caller's deadline reaches the handler and "do not
//! retry" reaches the caller.

use axum_core::response::{IntoResponse, Response};

/// 503 (breaker open, bulkhead full, shed, shutting down) with
/// `Retry-After` when known, or 504 (deadline, timeout), with a
/// problem+json body; `Do-Not-Retry` on every one but a deadline's or a
/// timeout's and a draining instance's, which a caller may retry: see
/// [`refusal_response`](crate::http::refusal_response).
impl IntoResponse for crate::Error {
    fn into_response(self) -> Response {
        let (parts, body) = crate::http::refusal_response(&self).into_parts();
        (parts, body).into_response()
    }
}

/// 502, 503 (a dependency asked to wait), 504 (a timeout) or 424 (the
/// dependency refused the request itself) with a problem+json body,
/// `Do-Not-Retry` when retrying this service cannot help: see
/// [`Error::to_response`](crate::http::Error::to_response).
impl IntoResponse for crate::http::Error {
    fn into_response(self) -> Response {
        let (parts, body) = self.to_response().into_parts();
        (parts, body).into_response()
    }
}
