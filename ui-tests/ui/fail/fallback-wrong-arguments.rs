// A fallback takes the annotated function's arguments, then its error:
// one that takes other arguments is reported at `fallback = …`, and the
// annotated function's parameters are left alone.

use resilient::resilient;

async fn only_the_error(_error: std::io::Error) -> Result<u32, std::io::Error> {
    Ok(1)
}

#[resilient(retries = 1, idempotent, fallback = only_the_error)]
async fn price(sku: u32) -> Result<u32, std::io::Error> {
    Ok(sku)
}

async fn swapped(_error: std::io::Error, sku: u32) -> Result<u32, std::io::Error> {
    Ok(sku)
}

#[resilient(deadline_ms = 100, fallback = swapped)]
async fn stock(sku: u32) -> Result<u32, std::io::Error> {
    Ok(sku)
}

fn main() {}
