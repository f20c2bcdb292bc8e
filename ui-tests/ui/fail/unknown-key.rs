use resilient::resilient;

#[resilient(retry = 3)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
