//! Property tests of the parsers of outside input in `resilient::http` and
//! `resilient::grpc`: `Retry-After`, `grpc-retry-pushback-ms` and the
//! deadline headers. Many generated inputs; round trips through formats
//! written here independently of the parser; never a panic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, StatusCode};
use proptest::prelude::*;
use resilient::Classification;
use resilient::grpc::{Pushback, parse_pushback};
use resilient::http::{
    GRPC_TIMEOUT, REQUEST_BUDGET_MS, classify_status, deadline_budget, insert_deadline,
    parse_retry_after,
};

/// 9999-12-31T23:59:59Z, the last instant an HTTP-date can name.
const LAST_HTTP_DATE: u64 = 253_402_300_799;

const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const LONG_DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Calendar fields of a Unix time (proleptic Gregorian, UTC), by Howard
/// Hinnant's `civil_from_days`.
struct Civil {
    year: u64,
    month: usize, // 0-based
    day: u64,
    weekday: usize, // 0 = Sunday
    hour: u64,
    min: u64,
    sec: u64,
}

fn civil(secs: u64) -> Civil {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as usize;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as u64;
    Civil {
        year,
        month: month - 1,
        day,
        weekday: ((days + 4) % 7) as usize, // 1970-01-01 was a Thursday
        hour: rem / 3600,
        min: rem / 60 % 60,
        sec: rem % 60,
    }
}

fn imf_fixdate(c: &Civil) -> String {
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[c.weekday], c.day, MONTHS[c.month], c.year, c.hour, c.min, c.sec
    )
}

fn rfc850(c: &Civil) -> String {
    format!(
        "{}, {:02}-{}-{:02} {:02}:{:02}:{:02} GMT",
        LONG_DAYS[c.weekday],
        c.day,
        MONTHS[c.month],
        c.year % 100,
        c.hour,
        c.min,
        c.sec
    )
}

fn asctime(c: &Civil) -> String {
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {:04}",
        DAYS[c.weekday], MONTHS[c.month], c.day, c.hour, c.min, c.sec, c.year
    )
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// The wait the parser must report for a date `date` seen at `now`.
fn expected_wait(date: u64, now: u64) -> Duration {
    Duration::from_secs(date.saturating_sub(now))
}

#[test]
fn the_rfc_9110_examples_parse_in_all_three_formats() {
    // RFC 9110 §5.6.7's own examples: the same instant three ways.
    let now = at(784_111_777 - 10);
    for s in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        assert_eq!(
            parse_retry_after(s, now),
            Some(Duration::from_secs(10)),
            "{s}"
        );
    }
}

#[test]
fn hostile_retry_after_values_are_ignored() {
    let now = SystemTime::now();
    for s in [
        "",
        " ",
        "-1",
        "+1",
        "1.5",
        "1e3",
        "0x10",
        "18446744073709551616", // u64::MAX + 1
        "99999999999999999999999999999999",
        "Sun, 31 Feb 2021 00:00:00 GMT", // no such day
        "Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Thu, 01 Jan 1969 00:00:00 GMT", // before the epoch
        "Sat, 01 Jan 10000 00:00:00 GMT",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "tomorrow",
        "١٢", // non-ASCII digits
    ] {
        assert_eq!(parse_retry_after(s, now), None, "{s:?}");
    }
    // The largest representable delta is returned as the server gave it:
    // bounding it is the engine's job.
    assert_eq!(
        parse_retry_after("18446744073709551615", now),
        Some(Duration::from_secs(u64::MAX))
    );
}

#[test]
fn retry_after_at_the_end_of_time_and_the_epoch() {
    let now = at(0);
    let c = civil(LAST_HTTP_DATE);
    assert_eq!(
        parse_retry_after(&imf_fixdate(&c), now),
        Some(Duration::from_secs(LAST_HTTP_DATE))
    );
    assert_eq!(
        parse_retry_after(&imf_fixdate(&civil(0)), at(LAST_HTTP_DATE)),
        Some(Duration::ZERO)
    );
}

#[test]
fn every_status_code_classifies_by_its_class() {
    let none = HeaderMap::new();
    let mut with_retry_after = HeaderMap::new();
    with_retry_after.insert(http::header::RETRY_AFTER, HeaderValue::from_static("3"));
    for code in 100..=999u16 {
        let status = StatusCode::from_u16(code).unwrap();
        let plain = classify_status(status, &none);
        let told = classify_status(status, &with_retry_after);
        match code {
            100..=399 => assert_eq!((plain, told), (None, None), "{code}"),
            408 | 502 | 504 => {
                assert_eq!(plain, Some(Classification::Transient), "{code}");
                assert_eq!(told, Some(Classification::Transient), "{code}");
            }
            429 | 503 => {
                assert_eq!(plain, Some(Classification::Transient), "{code}");
                assert_eq!(
                    told,
                    Some(Classification::Throttled {
                        retry_after: Some(Duration::from_secs(3))
                    }),
                    "{code}"
                );
            }
            // The server failed while processing: not retried, counted.
            500 => {
                let failed = Some(Classification::DoNotRetry { retry_after: None });
                assert_eq!((plain, told), (failed, failed), "{code}");
            }
            _ => {
                assert_eq!(plain, Some(Classification::Permanent), "{code}");
                assert_eq!(told, Some(Classification::Permanent), "{code}");
            }
        }
        // With `Do-Not-Retry`: nothing is retried, and what would have
        // been is still the dependency failing (for its breaker), with the
        // wait it asked for; the request's own fault stays permanent.
        let mut marked = with_retry_after.clone();
        resilient::http::set_do_not_retry(&mut marked);
        let dnr = classify_status(status, &marked);
        match told {
            None => assert_eq!(dnr, None, "{code}"),
            Some(Classification::Transient) => assert_eq!(
                dnr,
                Some(Classification::DoNotRetry { retry_after: None }),
                "{code}"
            ),
            Some(Classification::Throttled { retry_after }) => assert_eq!(
                dnr,
                Some(Classification::DoNotRetry { retry_after }),
                "{code}"
            ),
            Some(other) => assert_eq!(dnr, Some(other), "{code}"),
        }
        if let Some(class) = dnr {
            assert!(!class.is_retryable(), "{code}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn retry_after_never_panics_on_any_text(s in any::<String>(), now in 0..=LAST_HTTP_DATE) {
        let _ = parse_retry_after(&s, at(now));
    }

    #[test]
    fn retry_after_never_panics_on_date_like_text(
        s in "[A-Za-z0-9 ,:-]{0,40}",
        now in 0..=LAST_HTTP_DATE,
    ) {
        let _ = parse_retry_after(&s, at(now));
    }

    #[test]
    fn delta_seconds_round_trip(secs in any::<u64>(), pad_l in " {0,2}", pad_r in "[ \t]{0,2}") {
        let s = format!("{pad_l}{secs}{pad_r}");
        prop_assert_eq!(parse_retry_after(&s, SystemTime::now()), Some(Duration::from_secs(secs)));
    }

    #[test]
    fn negative_and_overflowing_deltas_are_ignored(n in 1..=u64::MAX, extra in "[0-9]{20,30}") {
        prop_assert_eq!(parse_retry_after(&format!("-{n}"), SystemTime::now()), None);
        // 20+ digits not starting with 0 overflow a u64 unless they fit
        let digits = format!("9{extra}");
        prop_assert_eq!(parse_retry_after(&digits, SystemTime::now()), None);
    }

    #[test]
    fn imf_fixdate_round_trips(date in 0..=LAST_HTTP_DATE, now in 0..=LAST_HTTP_DATE) {
        let s = imf_fixdate(&civil(date));
        prop_assert_eq!(parse_retry_after(&s, at(now)), Some(expected_wait(date, now)), "{}", s);
    }

    #[test]
    fn asctime_round_trips(date in 0..=LAST_HTTP_DATE, now in 0..=LAST_HTTP_DATE) {
        let s = asctime(&civil(date));
        prop_assert_eq!(parse_retry_after(&s, at(now)), Some(expected_wait(date, now)), "{}", s);
    }

    #[test]
    fn rfc850_round_trips_within_its_two_digit_years(
        // RFC 850 names the year in two digits; 70–99 are read as 19xx and
        // 00–69 as 20xx, so 1970..=2069 round-trips.
        date in 0..3_155_760_000u64,
        now in 0..=LAST_HTTP_DATE,
    ) {
        let s = rfc850(&civil(date));
        prop_assert_eq!(parse_retry_after(&s, at(now)), Some(expected_wait(date, now)), "{}", s);
    }

    #[test]
    fn a_date_with_the_wrong_weekday_is_ignored(date in 0..=LAST_HTTP_DATE, shift in 1..7usize) {
        let mut c = civil(date);
        c.weekday = (c.weekday + shift) % 7;
        prop_assert_eq!(parse_retry_after(&imf_fixdate(&c), at(0)), None);
        prop_assert_eq!(parse_retry_after(&asctime(&c), at(0)), None);
    }

    #[test]
    fn pushback_never_panics_and_non_digits_mean_do_not_retry(s in any::<String>()) {
        let p = parse_pushback(&s);
        let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            prop_assert_eq!(p, Pushback::DoNotRetry);
        }
    }

    #[test]
    fn pushback_round_trips_integers(n in any::<i64>()) {
        let expected = if n < 0 {
            Pushback::DoNotRetry
        } else {
            Pushback::RetryAfter(Duration::from_millis(n as u64))
        };
        prop_assert_eq!(parse_pushback(&n.to_string()), expected);
    }

    #[test]
    fn pushback_beyond_u64_means_do_not_retry(extra in "[0-9]{20,30}") {
        prop_assert_eq!(parse_pushback(&format!("9{extra}")), Pushback::DoNotRetry);
    }

    #[test]
    fn deadline_headers_round_trip_never_shortening(nanos in any::<u64>(), secs in 0..10_000_000u64) {
        let budget = Duration::from_secs(secs) + Duration::from_nanos(nanos % 1_000_000_000);
        let mut headers = HeaderMap::new();
        insert_deadline(&mut headers, budget);
        let back = deadline_budget(&headers).unwrap();
        // Rounded up (the next hop is never told it has less time than it
        // has), by less than a millisecond.
        prop_assert!(back >= budget, "{back:?} < {budget:?}");
        prop_assert!(back - budget < Duration::from_millis(1), "{back:?} vs {budget:?}");
    }

    #[test]
    fn deadline_headers_never_panic_on_any_bytes(
        grpc in proptest::collection::vec(32u8..127, 0..24),
        budget in proptest::collection::vec(32u8..127, 0..24),
    ) {
        let mut headers = HeaderMap::new();
        headers.insert(GRPC_TIMEOUT, HeaderValue::from_bytes(&grpc).unwrap());
        headers.insert(REQUEST_BUDGET_MS, HeaderValue::from_bytes(&budget).unwrap());
        let _ = deadline_budget(&headers);
    }
}
