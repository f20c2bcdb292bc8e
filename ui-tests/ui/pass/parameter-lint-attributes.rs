// A lint attribute on a parameter keeps working with `retries` (each
// attempt's copy of the argument carries it), as it does without them.
// Review 21: "unused variable: `x`" and a snake-case warning, despite the `allow`.
#![deny(warnings)]

use resilient::resilient;

#[resilient(retries = 1, idempotent)]
async fn unused(#[allow(unused_variables)] x: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 1, idempotent)]
async fn upper(#[allow(non_snake_case)] Id: u32) -> Result<u32, std::io::Error> {
    Ok(Id)
}

// Without the attribute's retries, both are quiet.
#[resilient(deadline_ms = 100)]
async fn once(#[allow(unused_variables)] x: u32, #[allow(non_snake_case)] Id: u32) -> Result<u32, std::io::Error> {
    Ok(Id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    unused(1).await.unwrap();
    assert_eq!(upper(2).await.unwrap(), 2);
    assert_eq!(once(1, 3).await.unwrap(), 3);
}

// An expectation on a parameter the body does not use is fulfilled (the
// attempt's copy is the one left unused).
#[resilient(retries = 1, idempotent)]
async fn expected(#[expect(unused_variables)] x: u32) -> Result<(), std::io::Error> {
    Ok(())
}

#[allow(dead_code)]
async fn use_expected() {
    expected(1).await.unwrap();
}
