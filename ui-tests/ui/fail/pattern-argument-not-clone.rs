// A pattern argument is copied for every attempt too: a type that is not
// `Clone` is reported at its type, as a named argument's is.

use resilient::resilient;

struct Pair(Vec<u8>, u32);

#[resilient(retries = 2, idempotent)]
async fn send(Pair(body, n): Pair) -> Result<usize, std::io::Error> {
    Ok(body.len() + n as usize)
}

fn main() {}
