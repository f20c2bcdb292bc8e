//! Remainders by a divisor fixed at construction, without a division
//! instruction (20 to 40 cycles on the processors we measure): the breaker's
//! count window and the overload windows take one on every call.
//!
//! This file depends on `std` only: the loom models compile it as it ships.

/// `x % d` for a fixed `d`, by multiplications: Lemire, Kaser and Kurz,
/// "Faster remainder by direct computation" (2019), exact for every 32-bit
/// `x` and `d`.
#[derive(Debug)]
pub(crate) struct Modulo {
    d: u64,
    m: u64,
}

impl Modulo {
    pub(crate) fn new(d: u32) -> Modulo {
        let d = u64::from(d.max(1));
        Modulo {
            d,
            m: (u64::MAX / d).wrapping_add(1),
        }
    }

    #[inline]
    pub(crate) fn of(&self, x: u32) -> u32 {
        let low = self.m.wrapping_mul(u64::from(x));
        ((u128::from(low) * u128::from(self.d)) >> 64) as u32
    }

    /// `x % d` for any `x`: by multiplications while `x` fits in 32 bits,
    /// by division past them.
    #[inline]
    pub(crate) fn of_u64(&self, x: u64) -> u64 {
        match u32::try_from(x) {
            Ok(x) => u64::from(self.of(x)),
            Err(_) => x % self.d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Modulo;
    use proptest::prelude::*;

    #[test]
    fn remainder_by_multiplication_is_exact_at_the_edges() {
        for d in [1, 2, 3, 7, 100, 1_000, 65_536, 999_999, 1_000_000, u32::MAX] {
            let m = Modulo::new(d);
            for x in [0, 1, d - 1, d, d.wrapping_add(1), u32::MAX - 1, u32::MAX] {
                assert_eq!(m.of(x), x % d, "{x} % {d}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_096))]
        #[test]
        fn remainder_by_multiplication_equals_the_remainder(d in 1u32.., x: u32) {
            prop_assert_eq!(Modulo::new(d).of(x), x % d);
        }

        #[test]
        fn wide_remainders_equal_the_remainder(d in 1u32.., x: u64) {
            prop_assert_eq!(Modulo::new(d).of_u64(x), x % u64::from(d));
            let near = u64::from(u32::MAX) - (x % 4);
            prop_assert_eq!(Modulo::new(d).of_u64(near), near % u64::from(d));
        }
    }
}
