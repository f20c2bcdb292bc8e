// A fallback must be an `async fn` returning the annotated function's type.

use resilient::resilient;

fn cached(_: std::io::Error) -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(deadline_ms = 100, fallback = cached)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
