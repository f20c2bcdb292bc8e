//! An HTTP date (IMF-fixdate, RFC 9110 §5.6.7), written with the standard
//! library only, for `Retry-After` answers in tests. Test binaries that
//! need it declare `#[path = "support/http_date.rs"] mod http_date;`.

use std::time::{SystemTime, UNIX_EPOCH};

/// `t` as an IMF-fixdate, to the second.
pub(crate) fn format(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap().as_secs();
    // Days since the epoch to a civil date (Howard Hinnant's algorithm).
    let days = secs / 86_400;
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(m - 1) as usize];
    let r = secs % 86_400;
    format!(
        "{wd}, {d:02} {mon} {y} {:02}:{:02}:{:02} GMT",
        r / 3600,
        r / 60 % 60,
        r % 60
    )
}
