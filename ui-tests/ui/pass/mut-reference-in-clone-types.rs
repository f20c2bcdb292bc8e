// Types that hold a `&mut` in their text but are `Clone` whatever they
// hold are reused by every attempt: not refused as `&mut` arguments are.

use std::marker::PhantomData;

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
async fn apply(
    step: fn(&mut u32),
    marker: PhantomData<&mut u32>,
    seen: &Option<&mut u32>,
) -> Result<bool, std::io::Error> {
    let mut n = 0;
    step(&mut n);
    let _ = marker;
    Ok(seen.is_some() && n == 1)
}

fn bump(n: &mut u32) {
    *n += 1;
}

fn main() {
    let mut x = 0;
    let seen = Some(&mut x);
    let ok = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(apply(bump, PhantomData, &seen))
        .unwrap();
    assert!(ok);
}
