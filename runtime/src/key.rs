//! Idempotency keys: how a non-idempotent operation is made safe to retry.

use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifies one logical operation across all its attempts, so the server
/// can recognise a retry of a request it already carried out and answer it
/// without doing it again (for HTTP, send it as the `Idempotency-Key`
/// header).
///
/// Create it once per logical operation, *before* the annotated call, and
/// pass it in: every attempt then sends the same key. A function that takes
/// one may declare `retries` without `idempotent`.
///
/// ```
/// use resilient::IdempotencyKey;
///
/// // From a stable id the caller already has: the same order is the same operation,
/// // even across a restart of the caller.
/// let key = IdempotencyKey::from_stable_id("order-8812").unwrap();
/// assert_eq!(key.as_str(), "order-8812");
///
/// // Or random (a version-4 UUID), unique per logical operation.
/// let key = IdempotencyKey::random();
/// let again = key.clone(); // cheap: a reference count
/// assert_eq!(key, again);
/// assert_eq!(key.as_str().len(), 36);
/// ```
///
/// # Reconciling a call that may have taken effect
///
/// A failed call is not always a call that did nothing: an attempt cut by
/// its timeout, or a connection reset after the request went out, may have
/// been carried out with its answer lost. Run the call under
/// [`observe`](crate::observe); when the report says it
/// [may have taken effect](crate::Report::may_have_taken_effect), look the
/// operation up by its key before doing it again or telling the user it
/// failed:
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// use resilient::{IdempotencyKey, resilient};
/// # use std::sync::Mutex;
/// # static CHARGED: Mutex<Vec<String>> = Mutex::new(Vec::new());
///
/// #[resilient(retries = 2, timeout_ms = 1000)]
/// async fn charge(key: &IdempotencyKey, cents: u64) -> Result<(), std::io::Error> {
///     // The provider records the charge under the key, then the answer is lost.
/// #   let _ = cents;
///     CHARGED.lock().unwrap().push(key.as_str().to_owned());
///     std::future::pending::<()>().await;
///     Ok(())
/// }
///
/// /// Asks the provider whether it carried out the operation with this key.
/// async fn find_charge(key: &IdempotencyKey) -> bool {
///     CHARGED.lock().unwrap().iter().any(|k| k == key.as_str())
/// }
///
/// let key = IdempotencyKey::random();
/// let (result, report) = resilient::observe(charge(&key, 1250)).await;
/// let charged = match result {
///     Ok(()) => true,
///     Err(_) if report.may_have_taken_effect() => find_charge(&key).await,
///     Err(_) => false, // certainly not carried out: safe to report a failure
/// };
/// assert!(charged, "the charge went through; only its answer was lost");
/// # }
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdempotencyKey(Arc<str>);

/// The longest stable id accepted, in bytes.
const MAX_KEY_LEN: usize = 255;

impl IdempotencyKey {
    /// A new random key, formatted as a version-4 UUID.
    ///
    /// The bits come from the standard library's randomly keyed SipHash over
    /// a process-wide counter, not from the jitter generator: seeding jitter
    /// in a test never makes two keys equal. Unique, but not a secret.
    pub fn random() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let state = RandomState::new();
        let word = |salt: u64| {
            let mut h = state.build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            h.write_u64(salt);
            h.finish()
        };
        let mut bits = (u128::from(word(1)) << 64) | u128::from(word(2));
        // RFC 9562: version 4 in bits 48..52, variant 0b10 in bits 64..66.
        bits = (bits & !(0xF << 76)) | (0x4 << 76);
        bits = (bits & !(0x3 << 62)) | (0x2 << 62);
        let hex = format!("{bits:032x}");
        Self(Arc::from(format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )))
    }

    /// A key from an id that already names the operation (an order id, a
    /// payment intent id): 1 to 255 visible ASCII characters other than `"`
    /// and `\`, so that it can be sent as a header value as it is.
    pub fn from_stable_id(id: impl AsRef<str>) -> Result<Self, InvalidIdempotencyKey> {
        let id = id.as_ref();
        let reason = if id.is_empty() {
            Some("it is empty")
        } else if id.len() > MAX_KEY_LEN {
            Some("it is longer than 255 bytes")
        } else if !id
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        {
            Some("it may hold only visible ASCII characters other than `\"` and `\\`")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(InvalidIdempotencyKey::new(reason)),
            None => Ok(Self(Arc::from(id))),
        }
    }

    /// The key an `Idempotency-Key` header value carries, written either
    /// bare, as Stripe and most payment APIs send it (`order-8812`), or as a
    /// structured-field string (RFC 8941 §3.3.3), as the IETF draft
    /// `draft-ietf-httpapi-idempotency-key-header` defines the field
    /// (`"order-8812"`, whose `\"` and `\\` escapes are undone). Either way
    /// the key itself must be one [`from_stable_id`](Self::from_stable_id)
    /// accepts, so the two spellings of a key are the same key. Whitespace
    /// around the value is ignored; anything after a quoted string
    /// (structured-field parameters) is refused.
    ///
    /// ```
    /// use resilient::IdempotencyKey;
    ///
    /// let bare = IdempotencyKey::from_header_value("order-8812").unwrap();
    /// let quoted = IdempotencyKey::from_header_value("\"order-8812\"").unwrap();
    /// assert_eq!(bare, quoted);
    /// assert!(IdempotencyKey::from_header_value("\"order 8812\"").is_err());
    /// ```
    pub fn from_header_value(value: &str) -> Result<Self, InvalidIdempotencyKey> {
        let value = value.trim_matches([' ', '\t']);
        let Some(quoted) = value.strip_prefix('"') else {
            return Self::from_stable_id(value);
        };
        let mut key = String::new();
        let mut chars = quoted.chars();
        loop {
            match chars.next() {
                None => {
                    return Err(InvalidIdempotencyKey::new(
                        "its quoted string is not closed",
                    ));
                }
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some(c @ ('"' | '\\')) => key.push(c),
                    _ => {
                        return Err(InvalidIdempotencyKey::new(
                            "its quoted string escapes a character other than `\"` or `\\`",
                        ));
                    }
                },
                Some(c) => key.push(c),
            }
        }
        if !chars.as_str().is_empty() {
            return Err(InvalidIdempotencyKey::new(
                "something follows its quoted string",
            ));
        }
        Self::from_stable_id(key)
    }

    /// The key as text, ready for an `Idempotency-Key` header.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&&*self.0).finish()
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A stable id that cannot be used as an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidIdempotencyKey {
    reason: &'static str,
}

impl InvalidIdempotencyKey {
    fn new(reason: &'static str) -> Self {
        InvalidIdempotencyKey { reason }
    }
}

impl fmt::Display for InvalidIdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid idempotency key: {}", self.reason)
    }
}

impl std::error::Error for InvalidIdempotencyKey {}
