// A `&mut T` held inside an argument (an `Option`, a `Pin`, a tuple)
// cannot be lent to every attempt either.

use std::pin::Pin;

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
async fn fill(buffer: Option<&mut Vec<u8>>) -> Result<usize, std::io::Error> {
    Ok(buffer.map_or(0, |b| b.len()))
}

#[resilient(retries = 2, idempotent)]
async fn pinned(buffer: Pin<&mut Vec<u8>>) -> Result<usize, std::io::Error> {
    Ok(buffer.len())
}

#[resilient(retries = 2, idempotent)]
async fn pair((count, step): (&mut u32, u32)) -> Result<u32, std::io::Error> {
    *count += step;
    Ok(*count)
}

fn main() {}
