use resilient::resilient;

#[resilient(crate = "not a path!")]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
