// An `impl Trait` in the return type cannot be named for the engine: one
// error, at the return type, saying what to write instead.
#[resilient::resilient(deadline_ms = 100)]
async fn describe() -> Result<impl std::fmt::Display, std::io::Error> {
    Ok(1)
}

fn main() {}
