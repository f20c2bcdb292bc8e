// Regression: parameters whose names come from a `macro_rules!` caller
// keep their hygiene, and patterns with `ref` bindings or `_` work under
// `retries` (an `_` argument is not copied, so it need not be `Clone`).

use resilient::resilient;

macro_rules! fetcher {
    ($name:ident, $arg:ident) => {
        #[resilient(retries = 1, idempotent)]
        async fn $name($arg: u32) -> Result<u32, std::io::Error> {
            Ok($arg + 1)
        }
    };
}

fetcher!(fetch, id);

struct NotClone;

#[resilient(retries = 1, idempotent)]
async fn with_ref_pattern(ref name: String, _: NotClone) -> Result<usize, std::io::Error> {
    Ok(name.len())
}

#[resilient(retries = 1, idempotent)]
async fn with_tuple_pattern((a, ref b): (u32, String)) -> Result<usize, std::io::Error> {
    Ok(a as usize + b.len())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(fetch(1).await.unwrap(), 2);
    assert_eq!(with_ref_pattern("abc".into(), NotClone).await.unwrap(), 3);
    assert_eq!(with_tuple_pattern((1, "ab".into())).await.unwrap(), 3);
}
