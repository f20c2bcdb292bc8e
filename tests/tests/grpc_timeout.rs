//! The `grpc-timeout` parser and encoder, property-tested: parsing never
//! panics and accepts exactly the specification's grammar; encoding
//! round-trips without ever shortening the budget.

use std::time::Duration;

use proptest::prelude::*;
use resilient::GrpcTimeout;

fn unit_nanos(unit: char) -> u128 {
    match unit {
        'H' => 3_600_000_000_000,
        'M' => 60_000_000_000,
        'S' => 1_000_000_000,
        'm' => 1_000_000,
        'u' => 1_000,
        'n' => 1,
        _ => unreachable!(),
    }
}

proptest! {
    #[test]
    fn parsing_arbitrary_text_never_panics(s in "\\PC*") {
        let _ = s.parse::<GrpcTimeout>();
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
        if let Ok(s) = std::str::from_utf8(&bytes) {
            let _ = s.parse::<GrpcTimeout>();
        }
    }

    #[test]
    fn valid_values_parse_to_their_duration(value in 0u64..=99_999_999, unit in prop::sample::select(vec!['H', 'M', 'S', 'm', 'u', 'n'])) {
        let text = format!("{value}{unit}");
        let parsed: GrpcTimeout = text.parse().unwrap();
        prop_assert_eq!(parsed.duration().as_nanos(), u128::from(value) * unit_nanos(unit));
        prop_assert_eq!(parsed.to_string(), text);
    }

    #[test]
    fn accepts_exactly_one_to_eight_digits_and_a_unit(s in "[0-9]{0,10}[HMSmunx]?") {
        let digits = s.trim_end_matches(|c: char| !c.is_ascii_digit()).len();
        let unit_ok = s.chars().last().is_some_and(|c| "HMSmun".contains(c));
        let valid = (1..=8).contains(&digits) && unit_ok && s.len() == digits + 1;
        prop_assert_eq!(s.parse::<GrpcTimeout>().is_ok(), valid, "{}", s);
    }

    #[test]
    fn encoding_round_trips_and_never_shortens(nanos in 0u64..u64::MAX) {
        let d = Duration::from_nanos(nanos);
        let encoded = GrpcTimeout::from(d);
        let text = encoded.to_string();
        prop_assert!(text.len() <= 9, "{}", text);
        let decoded: GrpcTimeout = text.parse().unwrap();
        prop_assert_eq!(decoded, encoded);
        // Rounded up, by less than one unit of the chosen precision.
        prop_assert!(decoded.duration() >= d);
        let unit = unit_nanos(text.chars().last().unwrap());
        prop_assert!(decoded.duration().as_nanos() - d.as_nanos() < unit);
    }
}

#[test]
fn refuses_malformed_values_with_an_error() {
    for bad in [
        "",
        "S",
        "10",
        "10s",
        "10x",
        "-1S",
        "+1S",
        "1.5S",
        " 1S",
        "1S ",
        "123456789m",
        "１S",
    ] {
        let err = bad.parse::<GrpcTimeout>().unwrap_err();
        assert!(
            err.to_string().starts_with("invalid `grpc-timeout` value"),
            "{bad}: {err}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_remaining_deadline_becomes_a_header_value() {
    assert_eq!(GrpcTimeout::from_remaining(), None);
    let header = resilient::with_deadline(Duration::from_millis(1500), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        GrpcTimeout::from_remaining()
    })
    .await
    .unwrap();
    assert_eq!(header.unwrap().to_string(), "1000000u");
}
