//! Compile-time behaviour of `#[resilient]`: what it accepts (`ui/pass`) and
//! how it refuses misuse (`ui/fail`, with the expected diagnostics in the
//! `.stderr` files next to each case).
//!
//! The `.stderr` files are blessed on the toolchain pinned in
//! `rust-toolchain.toml`. After changing a message, re-bless with
//! `TRYBUILD=overwrite cargo test -p resilient-ui-tests --test ui` and read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
