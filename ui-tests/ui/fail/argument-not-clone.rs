// With retries every attempt needs its own copy of each argument.

use resilient::resilient;

struct Request {
    body: Vec<u8>,
}

#[resilient(retries = 2, idempotent)]
async fn send(request: Request) -> Result<usize, std::io::Error> {
    Ok(request.body.len())
}

fn main() {}
