// A `&mut T` argument cannot be lent to every attempt.

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
async fn fill(buffer: &mut Vec<u8>) -> Result<usize, std::io::Error> {
    buffer.push(1);
    Ok(buffer.len())
}

fn main() {}
