// One attribute per function (review 21: a second one compiled, and its
// `retries` did nothing, the inner call's failure being final).

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
#[resilient(deadline_ms = 100)]
async fn twice() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
