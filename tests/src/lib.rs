//! Integration, model-checking and property tests of `resilient` live in
//! `tests/`. This library only carries the README's Rust snippets as
//! doctests, so that every snippet a reader copies compiles (and the ones
//! with a `main` run): `cargo test --workspace` checks them.

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeSnippets;
