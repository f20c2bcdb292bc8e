//! `Retry-After` (RFC 9110 §10.2.3): how long the server asks us to wait.

use std::time::{Duration, SystemTime};

use ::http::HeaderMap;
use ::http::header::RETRY_AFTER;

/// The wait a response's `Retry-After` header asks for, measured from now,
/// or `None` when it is absent or not well formed.
///
/// See [`parse_retry_after`] for the accepted forms. With several
/// `Retry-After` fields (not allowed by RFC 9110), the first one counts.
///
/// The value is returned as the server gave it. Bounding it is the engine's
/// job: it never sleeps past the call's deadline, and without a deadline it
/// gives up rather than wait more than [`crate::MAX_RETRY_AFTER`].
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?;
    parse_retry_after(value.to_str().ok()?, SystemTime::now())
}

/// Parses a `Retry-After` value, relative to `now`.
///
/// RFC 9110 §10.2.3 allows two forms, and this accepts exactly those:
///
/// * `delta-seconds`: one or more ASCII digits (no sign, no fraction);
///   values too large for a `u64` are refused rather than saturated, since a
///   server sending them is broken.
/// * `HTTP-date`, in any of the three formats §5.6.7 requires recipients to
///   accept: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC
///   850 form (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6
///   08:49:37 1994`). A date already passed means "now": zero. Impossible
///   dates (31 February, a wrong weekday) are refused.
///
/// Surrounding whitespace is ignored (a field value's optional whitespace).
/// Anything else gives `None`, never a panic (property-tested in
/// `tests/tests/http_parsers.rs`).
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use resilient::http::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_700); // Sun, 06 Nov 1994 08:48:20 GMT
/// assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
/// assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(Duration::from_secs(77)));
/// assert_eq!(parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now), Some(Duration::from_secs(77)));
/// assert_eq!(parse_retry_after("Sun Nov  6 08:49:37 1994", now), Some(Duration::from_secs(77)));
/// assert_eq!(parse_retry_after("Sat, 05 Nov 1994 08:49:37 GMT", now), Some(Duration::ZERO)); // passed
/// assert_eq!(parse_retry_after("-5", now), None);
/// assert_eq!(parse_retry_after("soon", now), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim_ascii();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only: delta-seconds. `u64::from_str` accepts a leading `+`,
        // which the grammar does not; the check above excludes it.
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}
