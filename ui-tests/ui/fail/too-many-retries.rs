// More than 10 retries only prolongs an outage.

use resilient::resilient;

#[resilient(retries = 11, idempotent)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
