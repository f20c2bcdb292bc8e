// An unused argument gets rustc's own warning, once, at the user's parameter,
// as it would without the attribute (denied here so it shows).
#![deny(unused_variables)]

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
async fn retried(unused: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(deadline_ms = 100)]
async fn once(unused: u32) -> Result<(), std::io::Error> {
    Ok(())
}

async fn plain(unused: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    let _ = (retried(0), once(0), plain(0));
}
