// A parameter typed like an idempotency key that is the user's own type, not
// `resilient::IdempotencyKey`: it does not make retrying safe.

use resilient::resilient;

#[derive(Clone)]
struct IdempotencyKey(String);

#[resilient(retries = 3)]
async fn charge(key: IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    let _ = key.0;
    Ok(cents)
}

fn main() {}

// A provider SDK's key beside the real one (review 44): refused, and the
// message says to import the SDK's under another name.
mod sdk {
    #[derive(Clone)]
    pub struct IdempotencyKey(pub String);
}

#[resilient(retries = 3)]
async fn refund(
    key: &resilient::IdempotencyKey,
    sdk_key: &sdk::IdempotencyKey,
    cents: u64,
) -> Result<u64, std::io::Error> {
    let _ = (key, &sdk_key.0);
    Ok(cents)
}
