//! Runnable examples of `resilient` live in `examples/`.
