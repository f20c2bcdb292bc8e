//! With a `fallback`, the future is `Send` whenever the body and the
//! fallback's future are, whatever the error and output types: the engine's
//! answer is not held across the fallback's `.await` (review 41: an error or
//! output type that is not `Send` made it not `Send`).
use resilient::{Classification, Classify, resilient};
use std::future::Future;
use std::rc::Rc;

#[derive(Debug)]
pub struct NotSendErr(Rc<u32>);
impl From<resilient::Error> for NotSendErr {
    fn from(_: resilient::Error) -> Self {
        NotSendErr(Rc::new(0))
    }
}
impl Classify for NotSendErr {
    fn classify(&self) -> Classification {
        Classification::Transient
    }
}

#[derive(Debug)]
pub struct E;
impl From<resilient::Error> for E {
    fn from(_: resilient::Error) -> Self {
        E
    }
}
impl Classify for E {
    fn classify(&self) -> Classification {
        Classification::Transient
    }
}

fn assert_send<T: Send>(t: T) -> T {
    t
}
async fn tick() {
    tokio::task::yield_now().await
}

fn fb_ns_err(_n: u32, e: NotSendErr) -> impl Future<Output = Result<u32, NotSendErr>> + Send {
    let v = *e.0;
    drop(e);
    async move {
        tick().await;
        Ok(v + 100)
    }
}

#[resilient(retries = 1, idempotent, fallback = fb_ns_err)]
async fn retry_fb_ns_err(n: u32) -> Result<u32, NotSendErr> {
    tick().await;
    if n > 0 {
        Err(NotSendErr(Rc::new(n)))
    } else {
        Ok(1)
    }
}

#[resilient(breaker = "f1", fallback = fb_ns_err)]
async fn once_fb_ns_err(n: u32) -> Result<u32, NotSendErr> {
    tick().await;
    if n > 0 {
        Err(NotSendErr(Rc::new(n)))
    } else {
        Ok(1)
    }
}

async fn fb_ns_out(_n: u32, _e: E) -> Result<Rc<u32>, E> {
    tick().await;
    Ok(Rc::new(7))
}

#[resilient(retries = 1, idempotent, breaker = "f2", fallback = fb_ns_out)]
async fn retry_fb_ns_out(n: u32) -> Result<Rc<u32>, E> {
    tick().await;
    if n > 0 { Err(E) } else { Ok(Rc::new(1)) }
}

#[test]
fn fallback_futures_are_send() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = tokio::spawn(assert_send(async {
            retry_fb_ns_err(1).await.map_err(|_| ())
        }))
        .await
        .unwrap();
        assert_eq!(a, Ok(101));
        let b = tokio::spawn(assert_send(async {
            once_fb_ns_err(1).await.map_err(|_| ())
        }))
        .await
        .unwrap();
        assert_eq!(b, Ok(101));
        let c = tokio::spawn(assert_send(async {
            retry_fb_ns_out(1).await.map(|v| *v).map_err(|_| ())
        }))
        .await
        .unwrap();
        assert_eq!(c, Ok(7));
    });
}
