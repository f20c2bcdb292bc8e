//! Integration, UI and model-checking tests of `resilient` live in `tests/`.
