use resilient::resilient;

#[resilient(retries = 2, idempotent, retries = 3)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 2, idempotent, idempotent)]
async fn flag_twice() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
