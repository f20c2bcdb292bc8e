//! The UI tests of `#[resilient]` live in `tests/ui.rs`, their cases in `ui/`.
