//! The `grpc-timeout` header: how a remaining deadline crosses a service
//! boundary.
//!
//! Format, per the gRPC "HTTP/2 protocol" specification: `TimeoutValue
//! TimeoutUnit`, where the value is a positive integer of at most 8 ASCII
//! digits and the unit one of `H` (hours), `M` (minutes), `S` (seconds), `m`
//! (milliseconds), `u` (microseconds), `n` (nanoseconds).
//!
//! "Positive" rules out zero (`TimeoutValue → {positive integer as ASCII
//! string of at most 8 digits}`, gRPC's PROTOCOL-HTTP2.md): `"0m"` is refused
//! when parsed and never emitted. A deadline that has already passed, or
//! less than a nanosecond left, is encoded as `"1n"`, the smallest value the
//! specification allows: the next hop sees a deadline that has expired by
//! the time it reads it and refuses at once, which is what the caller's
//! passed deadline means. (Sending no header instead would tell it "no
//! deadline at all".)

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const MAX_VALUE: u64 = 99_999_999;

/// A timeout as carried by the `grpc-timeout` header.
///
/// ```
/// use std::time::Duration;
/// use resilient::GrpcTimeout;
///
/// // Encoding picks the finest unit that fits in 8 digits, rounding up.
/// assert_eq!(GrpcTimeout::from(Duration::from_millis(1500)).to_string(), "1500000u");
/// assert_eq!(GrpcTimeout::from(Duration::from_secs(3600)).to_string(), "3600000m");
///
/// // Parsing refuses anything the specification does not allow.
/// assert_eq!("250m".parse::<GrpcTimeout>().unwrap().duration(), Duration::from_millis(250));
/// assert!("250".parse::<GrpcTimeout>().is_err());
/// assert!("123456789S".parse::<GrpcTimeout>().is_err());
///
/// // Zero is not a valid value: refused when read, never written.
/// assert!("0m".parse::<GrpcTimeout>().is_err());
/// assert_eq!(GrpcTimeout::from(Duration::ZERO).to_string(), "1n");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GrpcTimeout {
    value: u32,
    unit: Unit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Unit {
    Nanos,
    Micros,
    Millis,
    Seconds,
    Minutes,
    Hours,
}

impl Unit {
    const ALL: [Unit; 6] = [
        Unit::Nanos,
        Unit::Micros,
        Unit::Millis,
        Unit::Seconds,
        Unit::Minutes,
        Unit::Hours,
    ];

    fn nanos(self) -> u128 {
        match self {
            Unit::Nanos => 1,
            Unit::Micros => 1_000,
            Unit::Millis => 1_000_000,
            Unit::Seconds => 1_000_000_000,
            Unit::Minutes => 60_000_000_000,
            Unit::Hours => 3_600_000_000_000,
        }
    }

    fn symbol(self) -> char {
        match self {
            Unit::Nanos => 'n',
            Unit::Micros => 'u',
            Unit::Millis => 'm',
            Unit::Seconds => 'S',
            Unit::Minutes => 'M',
            Unit::Hours => 'H',
        }
    }

    fn from_symbol(c: u8) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.symbol() as u8 == c)
    }
}

impl GrpcTimeout {
    /// The timeout as a duration.
    pub fn duration(self) -> Duration {
        let nanos = u128::from(self.value) * self.unit.nanos();
        // 99,999,999 hours is about 3.6e20 ns: more than u64 nanoseconds
        // hold, but well within Duration's range.
        Duration::new(
            (nanos / 1_000_000_000) as u64,
            (nanos % 1_000_000_000) as u32,
        )
    }

    /// The current task's remaining deadline as a header value, or `None`
    /// when no deadline is set. A deadline that has passed is `"1n"` (see
    /// the module docs: the specification has no zero).
    pub fn from_remaining() -> Option<GrpcTimeout> {
        crate::remaining().map(GrpcTimeout::from)
    }
}

/// Encodes with the finest unit whose value fits in 8 digits, rounding up,
/// so the receiver is never told it has less time than the sender knows of
/// (the gRPC Go implementation rounds the same way). Durations beyond
/// 99,999,999 hours saturate. Zero, which the specification does not allow,
/// becomes `1n`, the least it does.
impl From<Duration> for GrpcTimeout {
    fn from(d: Duration) -> Self {
        let nanos = d.as_nanos().max(1);
        for unit in Unit::ALL {
            let value = nanos.div_ceil(unit.nanos());
            if value <= u128::from(MAX_VALUE) {
                return GrpcTimeout {
                    value: value as u32,
                    unit,
                };
            }
        }
        GrpcTimeout {
            value: MAX_VALUE as u32,
            unit: Unit::Hours,
        }
    }
}

impl fmt::Display for GrpcTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.value, self.unit.symbol())
    }
}

/// A `grpc-timeout` value that does not follow the specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidGrpcTimeout {
    reason: &'static str,
}

impl fmt::Display for InvalidGrpcTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `grpc-timeout` value: {}", self.reason)
    }
}

impl std::error::Error for InvalidGrpcTimeout {}

impl FromStr for GrpcTimeout {
    type Err = InvalidGrpcTimeout;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| Err(InvalidGrpcTimeout { reason });
        let bytes = s.as_bytes();
        let Some((&unit, digits)) = bytes.split_last() else {
            return err("empty");
        };
        let Some(unit) = Unit::from_symbol(unit) else {
            return err("the last character must be a unit: one of H, M, S, m, u, n");
        };
        if digits.is_empty() {
            return err("no digits before the unit");
        }
        if digits.len() > 8 {
            return err("more than 8 digits");
        }
        let mut value: u32 = 0;
        for &b in digits {
            if !b.is_ascii_digit() {
                return err("the value must be ASCII digits only");
            }
            // At most 8 digits: cannot overflow u32.
            value = value * 10 + u32::from(b - b'0');
        }
        if value == 0 {
            return err("the value must be positive (the gRPC specification has no zero timeout)");
        }
        Ok(GrpcTimeout { value, unit })
    }
}
