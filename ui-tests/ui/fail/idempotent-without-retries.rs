// `idempotent` only allows retries: alone it changes nothing, and a reader
// would take the function for one that is retried.

use resilient::resilient;

#[resilient(idempotent, deadline_ms = 500)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
