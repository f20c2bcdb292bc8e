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
    fn valid_values_parse_to_their_duration(value in 1u64..=99_999_999, unit in prop::sample::select(vec!['H', 'M', 'S', 'm', 'u', 'n'])) {
        let text = format!("{value}{unit}");
        let parsed: GrpcTimeout = text.parse().unwrap();
        prop_assert_eq!(parsed.duration().as_nanos(), u128::from(value) * unit_nanos(unit));
        prop_assert_eq!(parsed.to_string(), text);
    }

    #[test]
    fn accepts_exactly_one_to_eight_digits_and_a_unit(s in "[0-9]{0,10}[HMSmunx]?") {
        let digits = s.trim_end_matches(|c: char| !c.is_ascii_digit()).len();
        let unit_ok = s.chars().last().is_some_and(|c| "HMSmun".contains(c));
        let positive = s.bytes().any(|b| (b'1'..=b'9').contains(&b));
        let valid = (1..=8).contains(&digits) && unit_ok && s.len() == digits + 1 && positive;
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
        // Rounded up, by less than one unit of the chosen precision (zero,
        // which the specification has no way to say, goes up to 1n).
        prop_assert!(decoded.duration() >= d);
        prop_assert!(!decoded.duration().is_zero());
        let unit = unit_nanos(text.chars().last().unwrap());
        prop_assert!(decoded.duration().as_nanos() - d.as_nanos().max(1) < unit);
    }

    #[test]
    fn zero_is_refused_in_every_unit_and_width(zeros in 1usize..=8, unit in prop::sample::select(vec!['H', 'M', 'S', 'm', 'u', 'n'])) {
        let text = format!("{}{unit}", "0".repeat(zeros));
        prop_assert!(text.parse::<GrpcTimeout>().is_err(), "{}", text);
    }
}

/// The specification's `TimeoutValue` is a positive integer: "0m" and "0n"
/// were accepted, and a passed deadline was sent as "0n".
#[test]
fn zero_timeouts_are_neither_parsed_nor_emitted() {
    for zero in ["0m", "0n", "00000000S", "0H"] {
        let err = zero.parse::<GrpcTimeout>().unwrap_err();
        assert!(err.to_string().contains("positive"), "{zero}: {err}");
    }
    assert_eq!(GrpcTimeout::from(Duration::ZERO).to_string(), "1n");
    assert_eq!(
        GrpcTimeout::from(Duration::ZERO).duration(),
        Duration::from_nanos(1)
    );
}
