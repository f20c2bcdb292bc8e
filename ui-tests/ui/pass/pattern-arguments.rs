// Pattern and `mut` arguments with retries: each attempt gets its own copy,
// destructured and mutable as written.

use resilient::resilient;

#[derive(Clone)]
struct Point {
    x: u32,
    y: u32,
}

#[resilient(retries = 2, idempotent)]
async fn add((a, b): (u32, u32)) -> Result<u32, std::io::Error> {
    Ok(a + b)
}

#[resilient(retries = 2, idempotent)]
async fn norm(Point { x, y }: Point, _: u8) -> Result<u32, std::io::Error> {
    Ok(x * x + y * y)
}

#[resilient(retries = 2, idempotent)]
async fn push(mut items: Vec<u32>, mut n: u32) -> Result<Vec<u32>, std::io::Error> {
    n += 1;
    items.push(n);
    Ok(items)
}

#[resilient(retries = 2, idempotent)]
async fn nested(((a, mut b), [c, d]): ((u32, u32), [u32; 2])) -> Result<u32, std::io::Error> {
    b += 1;
    Ok(a + b + c + d)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(add((1, 2)).await.unwrap(), 3);
    assert_eq!(norm(Point { x: 3, y: 4 }, 0).await.unwrap(), 25);
    assert_eq!(push(vec![1], 1).await.unwrap(), [1, 2]);
    assert_eq!(nested(((1, 1), [1, 1])).await.unwrap(), 5);
}
