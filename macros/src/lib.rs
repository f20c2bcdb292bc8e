//! The `#[resilient]` attribute; see the `resilient` crate.
extern crate proc_macro;
