// `crate = "..."` for a renamed dependency, and its absolute form.

extern crate resilient as res;

#[res::resilient(crate = "res", retries = 1, idempotent)]
async fn renamed() -> Result<(), std::io::Error> {
    Ok(())
}

mod nested {
    #[res::resilient(crate = "::res", deadline_ms = 100)]
    pub(crate) async fn absolute() -> Result<(), std::io::Error> {
        Ok(())
    }
}

#[res::resilient(crate = "::resilient")]
async fn default_path() -> Result<(), std::io::Error> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    renamed().await.unwrap();
    nested::absolute().await.unwrap();
    default_path().await.unwrap();
}
