//! Outside-in tests (review 43) of the HTTP client, the server layer, gRPC
//! and configuration, against real servers on 127.0.0.1.

#[path = "support/http_date.rs"]
mod http_date;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::http::Error;
use resilient::reqwest::RequestBuilderExt;
use resilient::{Classification, Classify, IdempotencyKey, resilient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

// ---------------------------------------------------------------------------
// A scripted raw HTTP/1.1 server.
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Act {
    /// Status, extra header lines, body.
    Status(u16, Vec<String>, String),
    /// Reads the request, then resets the connection.
    Reset,
    /// Reads the request, then never answers.
    Hang,
    /// Status and headers at once, then the body one byte every `gap`.
    SlowBody(u16, Duration),
}

#[derive(Clone, Debug)]
struct Seen {
    at: Instant,
    head: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
    fn budget(&self) -> Option<u64> {
        self.header("request-budget-ms").map(|v| v.parse().unwrap())
    }
}

#[derive(Clone)]
struct Raw {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Raw {
    fn url(&self) -> String {
        format!("http://{}/x", self.addr)
    }
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves `script` in order, then repeats its last act.
async fn raw(script: Vec<Act>) -> Raw {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let seen = s.clone();
            let script = script.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                let head_end = loop {
                    if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                };
                let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
                let record = Seen {
                    at: Instant::now(),
                    head,
                };
                let len: usize = record
                    .header("content-length")
                    .map_or(0, |v| v.parse().unwrap());
                while got.len() < head_end + len {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                seen.lock().unwrap().push(record);
                let act = {
                    let mut script = script.lock().unwrap();
                    if script.len() > 1 {
                        script.pop_front().unwrap()
                    } else {
                        script.front().unwrap().clone()
                    }
                };
                match act {
                    Act::Status(code, headers, body) => {
                        let mut out = format!("HTTP/1.1 {code} X\r\nconnection: close\r\n");
                        for h in headers {
                            out.push_str(&h);
                            out.push_str("\r\n");
                        }
                        out.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
                        let _ = socket.write_all(out.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    }
                    Act::Reset => {
                        // A zero linger makes the drop a reset (RST), the
                        // point of this act; the socket is non-blocking, so
                        // the drop does not block the thread.
                        #[allow(deprecated)]
                        let _ = socket.set_linger(Some(Duration::ZERO));
                        drop(socket);
                    }
                    Act::Hang => {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    Act::SlowBody(code, gap) => {
                        let out = format!(
                            "HTTP/1.1 {code} X\r\nconnection: close\r\ncontent-length: 1000\r\n\r\n"
                        );
                        if socket.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                        for _ in 0..1000 {
                            tokio::time::sleep(gap).await;
                            if socket.write_all(b"a").await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    Raw { addr, seen }
}

fn status(code: u16) -> Act {
    Act::Status(code, vec![], String::new())
}

fn status_ra(code: u16, retry_after: &str) -> Act {
    Act::Status(
        code,
        vec![format!("retry-after: {retry_after}")],
        String::new(),
    )
}

fn ok() -> Act {
    Act::Status(200, vec![], "done".into())
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------
// Annotated client functions.
// ---------------------------------------------------------------------------

#[resilient(retries = 3, deadline_ms = 5000, base_ms = 10, cap_ms = 50)]
async fn post_keyed(
    client: &reqwest::Client,
    url: &str,
    key: &IdempotencyKey,
) -> Result<String, Error> {
    let response = client
        .post(url)
        .idempotency_key(key)
        .body("charge")
        .send_checked()
        .await?;
    Ok(response.text().await?)
}

#[resilient(retries = 3, deadline_ms = 2000, base_ms = 10, cap_ms = 50)]
async fn post_keyed_2s(
    client: &reqwest::Client,
    url: &str,
    key: &IdempotencyKey,
) -> Result<String, Error> {
    let response = client
        .post(url)
        .idempotency_key(key)
        .body("charge")
        .send_checked()
        .await?;
    Ok(response.text().await?)
}

#[resilient(retries = 3, base_ms = 10, cap_ms = 50, idempotent)]
async fn get_no_deadline(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

#[resilient(
    retries = 2,
    deadline_ms = 3000,
    timeout_ms = 300,
    base_ms = 10,
    cap_ms = 50,
    idempotent
)]
async fn get_timed(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

#[resilient(
    retries = 2,
    deadline_ms = 8000,
    timeout_ms = 5000,
    base_ms = 10,
    cap_ms = 50,
    idempotent
)]
async fn get_long_timeout(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

/// A POST with no key and no retries: must never be sent twice.
#[resilient(deadline_ms = 3000, timeout_ms = 1000)]
async fn post_unkeyed(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client
        .post(url)
        .body("charge")
        .send_checked()
        .await?
        .text()
        .await?)
}

// ---------------------------------------------------------------------------
// 1. HTTP client.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn client_retry_after_seconds_obeyed_same_key_budget_shrinks() {
    let server = raw(vec![status_ra(503, "1"), ok()]).await;
    let key = IdempotencyKey::random();
    let start = Instant::now();
    let out = post_keyed(&client(), &server.url(), &key).await.unwrap();
    assert_eq!(out, "done");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_millis(1000), "slept {gap:?}");
    assert!(gap < Duration::from_millis(1600), "slept {gap:?}");
    for s in &seen {
        assert_eq!(s.header("idempotency-key").as_deref(), Some(key.as_str()));
        assert!(s.header("grpc-timeout").is_some());
    }
    let (b0, b1) = (seen[0].budget().unwrap(), seen[1].budget().unwrap());
    assert!(b0 <= 5000 && b0 > 4500, "{b0}");
    assert!(b1 <= 5000 - 1000 && b1 > 3000, "{b1}");
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn client_retry_after_http_date_obeyed() {
    let when = http_date::format(std::time::SystemTime::now() + Duration::from_secs(2));
    let server = raw(vec![status_ra(429, &when), ok()]).await;
    let key = IdempotencyKey::random();
    post_keyed(&client(), &server.url(), &key).await.unwrap();
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at - seen[0].at;
    // The date has whole seconds: at least 1 s from now.
    assert!(gap >= Duration::from_millis(1000), "slept {gap:?}");
    assert!(gap < Duration::from_millis(2600), "slept {gap:?}");
}

#[tokio::test]
async fn client_retry_after_past_date_negative_and_invalid_retry_soon() {
    let past = http_date::format(std::time::SystemTime::now() - Duration::from_secs(3600));
    for ra in [
        past.as_str(),
        "-5",
        "soon",
        "1.5",
        "",
        "99999999999999999999999",
    ] {
        let server = raw(vec![status_ra(503, ra), ok()]).await;
        let key = IdempotencyKey::random();
        let start = Instant::now();
        post_keyed(&client(), &server.url(), &key)
            .await
            .unwrap_or_else(|e| panic!("{ra:?}: {e}"));
        assert_eq!(server.seen().len(), 2, "{ra:?}");
        assert!(start.elapsed() < Duration::from_millis(900), "{ra:?}");
    }
}

#[tokio::test]
async fn client_retry_after_beyond_deadline_gives_up_at_once() {
    let far = http_date::format(std::time::SystemTime::now() + Duration::from_secs(3600));
    for ra in [
        "30",
        far.as_str(),
        "18446744073709551615",
        "9223372036854775807",
    ] {
        let server = raw(vec![status_ra(503, ra), ok()]).await;
        let key = IdempotencyKey::random();
        let start = Instant::now();
        let (result, report) =
            resilient::observe(post_keyed_2s(&client(), &server.url(), &key)).await;
        let e = result.unwrap_err();
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "{ra:?}: waited {:?}",
            start.elapsed()
        );
        assert_eq!(server.seen().len(), 1, "{ra:?}");
        assert_eq!(
            e.status(),
            Some(http::StatusCode::SERVICE_UNAVAILABLE),
            "{ra:?}"
        );
        assert!(
            matches!(
                e.classify(),
                Classification::Throttled {
                    retry_after: Some(_)
                }
            ),
            "{ra:?}: {:?}",
            e.classify()
        );
        assert!(report.gave_up(), "{ra:?}");
        assert!(!report.may_have_taken_effect(), "{ra:?}: a 503 did nothing");
    }
}

#[tokio::test]
async fn client_retry_after_beyond_max_without_deadline_is_not_retried() {
    for ra in ["61", "18446744073709551615"] {
        let server = raw(vec![status_ra(429, ra), ok()]).await;
        let start = Instant::now();
        let e = get_no_deadline(&client(), &server.url()).await.unwrap_err();
        assert!(start.elapsed() < Duration::from_millis(500), "{ra:?}");
        assert_eq!(server.seen().len(), 1, "{ra:?}");
        assert_eq!(e.status(), Some(http::StatusCode::TOO_MANY_REQUESTS));
    }
}

#[tokio::test]
async fn client_retries_only_transient_statuses() {
    // Retried: 408, 502, 503, 504, 429.
    for code in [408u16, 429, 502, 503, 504] {
        let server = raw(vec![status(code), ok()]).await;
        let key = IdempotencyKey::random();
        post_keyed(&client(), &server.url(), &key)
            .await
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        assert_eq!(server.seen().len(), 2, "{code}");
    }
    // Not retried: 500, 400, 401, 404, 409, 422, 501.
    for code in [500u16, 400, 401, 404, 409, 422, 501] {
        let server = raw(vec![Act::Status(code, vec![], "why".into()), ok()]).await;
        let key = IdempotencyKey::random();
        let e = post_keyed(&client(), &server.url(), &key)
            .await
            .unwrap_err();
        assert_eq!(server.seen().len(), 1, "{code}");
        assert_eq!(e.status().map(|s| s.as_u16()), Some(code));
        assert_eq!(e.body(), Some("why"), "{code}");
    }
    // A 503 marked Do-Not-Retry is not retried.
    let server = raw(vec![
        Act::Status(
            503,
            vec!["do-not-retry: ?1".into(), "retry-after: 0".into()],
            String::new(),
        ),
        ok(),
    ])
    .await;
    let key = IdempotencyKey::random();
    let e = post_keyed(&client(), &server.url(), &key)
        .await
        .unwrap_err();
    assert_eq!(server.seen().len(), 1);
    assert!(e.is_do_not_retry());
}

#[tokio::test]
async fn client_connection_reset_after_sending_is_retried_with_the_same_key() {
    let server = raw(vec![Act::Reset, Act::Reset, ok()]).await;
    let key = IdempotencyKey::random();
    let (result, report) = resilient::observe(post_keyed(&client(), &server.url(), &key)).await;
    assert_eq!(result.unwrap(), "done");
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.header("idempotency-key").as_deref(), Some(key.as_str()));
    }
    assert!(report.may_have_taken_effect());
}

#[tokio::test]
async fn client_unkeyed_post_is_never_sent_twice() {
    for act in [
        Act::Reset,
        status(503),
        status_ra(503, "0"),
        status(502),
        Act::Hang,
    ] {
        let server = raw(vec![act.clone(), ok()]).await;
        let (result, _report) = resilient::observe(post_unkeyed(&client(), &server.url())).await;
        assert!(result.is_err(), "{act:?}");
        // Give any hidden retry the time to arrive.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(server.seen().len(), 1, "{act:?}");
    }
}

#[tokio::test]
async fn client_hang_is_cut_per_attempt_and_budget_is_the_attempts() {
    let server = raw(vec![Act::Hang]).await;
    let start = Instant::now();
    let (result, report) = resilient::observe(get_timed(&client(), &server.url())).await;
    let e = result.unwrap_err();
    assert!(e.is_timeout() || e.refusal().is_some(), "{e}");
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        let b = s.budget().unwrap();
        assert!(b <= 300, "{b}");
    }
    assert!(start.elapsed() < Duration::from_millis(1500));
    assert!(report.may_have_taken_effect());
}

#[tokio::test]
async fn client_slow_success_body_is_cut_by_the_attempt_timeout() {
    let server = raw(vec![Act::SlowBody(200, Duration::from_millis(50))]).await;
    let start = Instant::now();
    let (result, _report) = resilient::observe(get_timed(&client(), &server.url())).await;
    assert!(result.is_err());
    assert_eq!(
        server.seen().len(),
        3,
        "each slow body is an attempt that timed out"
    );
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn client_slow_error_body_is_read_for_a_bounded_time_and_stays_permanent() {
    let server = raw(vec![Act::SlowBody(404, Duration::from_millis(100))]).await;
    let start = Instant::now();
    let e = get_long_timeout(&client(), &server.url())
        .await
        .unwrap_err();
    let took = start.elapsed();
    assert!(took < Duration::from_millis(1600), "{took:?}");
    assert_eq!(e.status(), Some(http::StatusCode::NOT_FOUND));
    assert_eq!(e.classify(), Classification::Permanent);
    assert!(!e.is_timeout());
    assert_eq!(server.seen().len(), 1);
}

// ---------------------------------------------------------------------------
// 2. Server layer.
// ---------------------------------------------------------------------------

use axum::Router;
use axum::routing::get;
use resilient::tower::ResilienceLayer;

async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

type Deadlines = Arc<Mutex<Vec<Option<Duration>>>>;

async fn deadline_server() -> (SocketAddr, Deadlines) {
    let seen: Deadlines = Arc::default();
    let s = seen.clone();
    let router = Router::new()
        .route(
            "/d",
            get(move || {
                let s = s.clone();
                async move {
                    s.lock().unwrap().push(resilient::remaining());
                    "ok"
                }
            }),
        )
        .layer(ResilienceLayer::new());
    (serve(router).await, seen)
}

#[tokio::test]
async fn server_reads_deadline_headers_absent_malformed_zero_huge() {
    let (addr, seen) = deadline_server().await;
    let c = client();
    let url = format!("http://{addr}/d");
    // Absent.
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(seen.lock().unwrap().pop().unwrap(), None);
    // Malformed: ignored.
    for bad in ["abc", "-5", "1.5", "+5", "99999999999999999999999"] {
        let r = c
            .get(&url)
            .header("request-budget-ms", bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{bad}");
        assert_eq!(seen.lock().unwrap().pop().unwrap(), None, "{bad}");
    }
    for bad in ["0m", "5", "5x", "123456789S", "-1S"] {
        let r = c
            .get(&url)
            .header("grpc-timeout", bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{bad}");
        assert_eq!(seen.lock().unwrap().pop().unwrap(), None, "{bad}");
    }
    // A normal one: less a tenth kept for the answer.
    let r = c
        .get(&url)
        .header("request-budget-ms", "1000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let d = seen.lock().unwrap().pop().unwrap().unwrap();
    assert!(
        d <= Duration::from_millis(900) && d > Duration::from_millis(800),
        "{d:?}"
    );
    // Both: the sooner wins.
    let r = c
        .get(&url)
        .header("request-budget-ms", "5000")
        .header("grpc-timeout", "1S")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let d = seen.lock().unwrap().pop().unwrap().unwrap();
    assert!(d <= Duration::from_millis(900), "{d:?}");
    // Zero: 504 problem+json at once, handler not run.
    let r = c
        .get(&url)
        .header("request-budget-ms", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert!(r.headers().get("do-not-retry").is_none());
    let body = r.text().await.unwrap();
    assert!(body.contains("\"kind\":\"deadline_exceeded\""), "{body}");
    assert!(seen.lock().unwrap().is_empty());
    // 1 ns: passed on arrival.
    let r = c
        .get(&url)
        .header("grpc-timeout", "1n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    assert!(seen.lock().unwrap().is_empty());
    // Huge: no panic, the handler runs.
    for huge in ["9999999999999999999", "1000000000000000000"] {
        let r = c
            .get(&url)
            .header("request-budget-ms", huge)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{huge}");
        seen.lock().unwrap().pop().unwrap();
    }
    let r = c
        .get(&url)
        .header("grpc-timeout", "99999999H")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    seen.lock().unwrap().pop().unwrap();
}

/// A handler under a huge incoming budget calls onwards: the next hop is
/// told a deadline, and nothing panics.
#[resilient(breaker = "review43_huge")]
async fn onward(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

#[tokio::test]
async fn server_huge_budget_passes_on_without_panic() {
    let (inner, seen) = deadline_server().await;
    let registry = resilient::Registry::builder().build().unwrap();
    let reg = registry.clone();
    let router = Router::new()
        .route(
            "/a",
            get(move || {
                let reg = reg.clone();
                async move {
                    let c = client();
                    reg.scope(onward(&c, &format!("http://{inner}/d")))
                        .await
                        .map_err(|e| e.to_string())
                }
            }),
        )
        .layer(ResilienceLayer::new());
    let addr = serve(router).await;
    for huge in ["9999999999999999999", "1000000000000000000", "86400001"] {
        let r = client()
            .get(format!("http://{addr}/a"))
            .header("request-budget-ms", huge)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{huge}: {}", r.text().await.unwrap());
        let d = seen.lock().unwrap().pop().unwrap();
        assert!(d.is_some(), "{huge}: the next hop gets a deadline");
    }
}

#[resilient(breaker = "review43_open")]
async fn through_breaker(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

#[resilient(bulkhead = "review43_bulk")]
async fn through_bulkhead(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

#[tokio::test]
async fn server_answers_refusals_with_status_retry_after_and_problem_json() {
    let failing = raw(vec![status(502)]).await;
    let hanging = raw(vec![Act::Hang]).await;
    let registry = resilient::Registry::builder()
        .toml(
            r#"
            [breakers.review43_open]
            sliding_window_size = 2
            minimum_number_of_calls = 2
            wait_duration_in_open_state_ms = 7500

            [bulkheads.review43_bulk]
            max_concurrent = 1
            "#,
        )
        .unwrap()
        .build()
        .unwrap();
    let reg = registry.clone();
    let reg2 = registry.clone();
    let furl = failing.url();
    let hurl = hanging.url();
    let router = Router::new()
        .route(
            "/breaker",
            get(move || {
                let reg = reg.clone();
                let url = furl.clone();
                async move {
                    let c = client();
                    reg.scope(through_breaker(&c, &url)).await
                }
            }),
        )
        .route(
            "/bulkhead",
            get(move || {
                let reg = reg2.clone();
                let url = hurl.clone();
                async move {
                    let c = client();
                    reg.scope(through_bulkhead(&c, &url)).await
                }
            }),
        )
        .layer(ResilienceLayer::new());
    let addr = serve(router).await;
    let c = client();
    // Two 502s open the breaker; they answer 502.
    for _ in 0..2 {
        let r = c
            .get(format!("http://{addr}/breaker"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 502);
    }
    let r = c
        .get(format!("http://{addr}/breaker"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(r.headers()["do-not-retry"], "?1");
    let ra: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((7..=8).contains(&ra), "{ra}");
    let body = r.text().await.unwrap();
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["kind"], "breaker_open");
    assert_eq!(json["name"], "review43_open");
    assert_eq!(json["status"], 503);
    assert_eq!(failing.seen().len(), 2);

    // Bulkhead: one request holds the only slot.
    let first = tokio::spawn({
        let c = c.clone();
        async move {
            c.get(format!("http://{addr}/bulkhead"))
                .header("request-budget-ms", "1500")
                .send()
                .await
                .unwrap()
        }
    });
    while hanging.seen().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = c
        .get(format!("http://{addr}/bulkhead"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let r_dnr = r.headers().get("do-not-retry").is_some();
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body = r.text().await.unwrap();
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["kind"], "bulkhead_full");
    assert!(
        r_dnr,
        "a full bulkhead is this service's refusal: Do-Not-Retry"
    );
    assert_eq!(json["name"], "review43_bulk");
    // The first is cut by its deadline: 504.
    let r = first.await.unwrap();
    assert_eq!(r.status(), 504);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
}

// A chain of three services: client -> A -> B -> C, C hangs.

#[resilient(retries = 3, timeout_ms = 250, base_ms = 10, cap_ms = 50, idempotent)]
async fn hop(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

#[resilient(retries = 3, deadline_ms = 4000, base_ms = 10, cap_ms = 50, idempotent)]
async fn user_request(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

type Budgets = Arc<Mutex<Vec<(Instant, Option<u64>)>>>;

async fn relay(next: String) -> (SocketAddr, Budgets) {
    let seen: Budgets = Arc::default();
    let s = seen.clone();
    let router = Router::new()
        .route(
            "/x",
            get(move |headers: http::HeaderMap| {
                let s = s.clone();
                let next = next.clone();
                async move {
                    s.lock().unwrap().push((
                        Instant::now(),
                        headers
                            .get("request-budget-ms")
                            .map(|v| v.to_str().unwrap().parse().unwrap()),
                    ));
                    hop(&client(), &next).await
                }
            }),
        )
        .layer(ResilienceLayer::new());
    (serve(router).await, seen)
}

#[tokio::test]
async fn chain_of_three_deadline_shrinks_and_retries_do_not_multiply() {
    let c_srv = raw(vec![Act::Hang]).await;
    let (b, b_seen) = relay(c_srv.url()).await;
    let (a, a_seen) = relay(format!("http://{b}/x")).await;
    let start = Instant::now();
    let (result, report) =
        resilient::observe(user_request(&client(), &format!("http://{a}/x"))).await;
    let took = start.elapsed();
    let e = result.unwrap_err();
    let a_seen = a_seen.lock().unwrap().clone();
    let b_seen = b_seen.lock().unwrap().clone();
    let c_seen = c_srv.seen();
    eprintln!(
        "took {took:?}; client attempts {}; A {:?}; B {:?}; C {:?}; err {e}",
        report.attempts().len(),
        a_seen.iter().map(|x| x.1).collect::<Vec<_>>(),
        b_seen.iter().map(|x| x.1).collect::<Vec<_>>(),
        c_seen.iter().map(|x| x.budget()).collect::<Vec<_>>()
    );
    assert!(took < Duration::from_millis(4100));
    // C: at most 4 attempts per user request.
    assert!(c_seen.len() <= 4, "C saw {} attempts", c_seen.len());
    // The deadline shrinks along the chain.
    for (_, budget) in &a_seen {
        assert!(budget.unwrap() <= 4000);
    }
    for (_, budget) in &b_seen {
        assert!(budget.unwrap() <= 250);
    }
    for s in &c_seen {
        assert!(s.budget().unwrap() <= 250);
    }
}

// ---------------------------------------------------------------------------
// 3. gRPC over tonic.
// ---------------------------------------------------------------------------

use resilient::tonic::RequestExt;
use tonic::transport::{Channel, Server, server::TcpIncoming};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

type GrpcSeen = Arc<Mutex<Vec<(Instant, http::HeaderMap)>>>;

/// The health service, answering the scripted statuses first (`None`:
/// the real service answers).
#[derive(Clone)]
struct Scripted<S> {
    inner: S,
    script: Arc<Mutex<VecDeque<Option<Status>>>>,
    seen: GrpcSeen,
}

impl<S> tonic::server::NamedService for Scripted<S> {
    const NAME: &'static str = "grpc.health.v1.Health";
}

impl<S> tower::Service<http::Request<tonic::body::Body>> for Scripted<S>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        self.seen
            .lock()
            .unwrap()
            .push((Instant::now(), request.headers().clone()));
        let next = {
            let mut script = self.script.lock().unwrap();
            script.pop_front().flatten()
        };
        match next {
            Some(status) => Box::pin(async move { Ok(status.into_http()) }),
            None => {
                let mut inner = self.inner.clone();
                Box::pin(async move { inner.call(request).await })
            }
        }
    }
}

fn with_pushback(code: Code, pushback: &str) -> Status {
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert("grpc-retry-pushback-ms", pushback.parse().unwrap());
    Status::with_metadata(code, "scripted", metadata)
}

async fn grpc_server(script: Vec<Option<Status>>) -> (SocketAddr, GrpcSeen) {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("payments", tonic_health::ServingStatus::Serving)
        .await;
    let seen: GrpcSeen = Arc::default();
    let svc = Scripted {
        inner: health,
        script: Arc::new(Mutex::new(VecDeque::from(script))),
        seen: seen.clone(),
    };
    (grpc_serve(svc, reporter).await, seen)
}

/// Serves `svc` behind `ResilienceLayer` on loopback, keeping `keep` (the
/// health reporter) alive with the server.
async fn grpc_serve<S, K>(svc: Scripted<S>, keep: K) -> SocketAddr
where
    Scripted<S>: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static,
    K: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _keep = keep;
        Server::builder()
            .layer(ResilienceLayer::new())
            .add_service(svc)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });
    addr
}

fn grpc_client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    HealthClient::new(channel)
}

#[resilient(retries = 3, base_ms = 10, cap_ms = 50, deadline_ms = 1500, idempotent)]
async fn grpc_check(mut client: HealthClient<Channel>) -> Result<i32, Status> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: "payments".to_owned(),
    });
    request.propagate_deadline();
    Ok(client.check(request).await?.into_inner().status)
}

fn grpc_timeout_of(h: &http::HeaderMap) -> Duration {
    h.get("grpc-timeout")
        .unwrap()
        .to_str()
        .unwrap()
        .parse::<resilient::GrpcTimeout>()
        .unwrap()
        .duration()
}

#[tokio::test]
async fn grpc_unavailable_retried_with_timeout_propagated() {
    let (addr, seen) = grpc_server(vec![Some(Status::unavailable("down")), None]).await;
    let (result, report) = resilient::observe(grpc_check(grpc_client(addr))).await;
    assert_eq!(result.unwrap(), 1);
    assert_eq!(report.attempts().len(), 2);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let (t0, t1) = (grpc_timeout_of(&seen[0].1), grpc_timeout_of(&seen[1].1));
    assert!(
        t0 <= Duration::from_millis(1500) && t0 > Duration::from_millis(1300),
        "{t0:?}"
    );
    assert!(t1 < t0, "{t1:?} !< {t0:?}");
}

#[tokio::test]
async fn grpc_pushback_is_obeyed() {
    let (addr, seen) = grpc_server(vec![Some(with_pushback(Code::Unavailable, "400")), None]).await;
    grpc_check(grpc_client(addr)).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].0 - seen[0].0;
    assert!(gap >= Duration::from_millis(400), "{gap:?}");
    assert!(gap < Duration::from_millis(900), "{gap:?}");
}

#[tokio::test]
async fn grpc_pushback_beyond_deadline_gives_up_at_once() {
    let (addr, seen) = grpc_server(vec![
        Some(with_pushback(Code::ResourceExhausted, "5000")),
        None,
    ])
    .await;
    let start = Instant::now();
    let e = grpc_check(grpc_client(addr)).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(500));
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn grpc_status_classification_on_the_wire() {
    let cases = [
        (Status::invalid_argument("bad"), 1usize),
        (Status::internal("bug"), 1),
        (Status::unknown("?"), 1),
        (Status::not_found("?"), 1),
        (Status::permission_denied("?"), 1),
        (Status::failed_precondition("?"), 1),
        (Status::aborted("?"), 1),
        (with_pushback(Code::Unavailable, "-1"), 1),
        (with_pushback(Code::Unavailable, "soon"), 1),
        (Status::unavailable("x"), 2),
        (Status::deadline_exceeded("x"), 2),
        (Status::resource_exhausted("x"), 2),
        (with_pushback(Code::Unavailable, "0"), 2),
    ];
    for (status, expected) in cases {
        let code = status.code();
        let (addr, seen) = grpc_server(vec![Some(status.clone()), None]).await;
        let result = grpc_check(grpc_client(addr)).await;
        assert_eq!(seen.lock().unwrap().len(), expected, "{status:?}");
        if expected == 1 {
            assert_eq!(result.unwrap_err().code(), code, "{status:?}");
        } else {
            result.unwrap();
        }
    }
}

// ---------------------------------------------------------------------------
// 4. Configuration.
// ---------------------------------------------------------------------------

fn problems_of(text: &str) -> Vec<resilient::Problem> {
    match resilient::Registry::builder().toml(text) {
        Err(e) => e.problems().to_vec(),
        Ok(builder) => match builder.build() {
            Ok(_) => vec![],
            Err(e) => e.problems().to_vec(),
        },
    }
}

fn assert_refused(text: &str, key: &str, value: &str) {
    let problems = problems_of(text);
    assert!(
        problems
            .iter()
            .any(|p| p.key() == key && p.value() == value && p.line().is_some()),
        "{text}\n=> {:#?}",
        problems.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
}

#[test]
fn config_refuses_unknown_keys_wrong_types_and_ranges_naming_key_and_value() {
    let cases: &[(&str, &str, &str)] = &[
        ("[breakers.p]\nfailure_rate = 50\n", "failure_rate", "50"),
        (
            "[breakers.p]\nsliding_window_size = \"10\"\n",
            "sliding_window_size",
            "\"10\"",
        ),
        (
            "[breakers.p]\nfailure_rate_threshold = true\n",
            "failure_rate_threshold",
            "true",
        ),
        (
            "[breakers.p]\nwait_duration_in_open_state_ms = 1.5\n",
            "wait_duration_in_open_state_ms",
            "1.5",
        ),
        (
            "[breakers.p]\nwait_duration_in_open_state_ms = -1\n",
            "wait_duration_in_open_state_ms",
            "-1",
        ),
        (
            "[breakers.p]\nwait_duration_in_open_state_ms = 0\n",
            "wait_duration_in_open_state_ms",
            "0",
        ),
        (
            "[breakers.p]\nwait_duration_in_open_state_ms = 9223372036854775807\n",
            "wait_duration_in_open_state_ms",
            "9223372036854775807",
        ),
        (
            "[breakers.p]\nslow_call_duration_threshold_ms = 9223372036854775807\n",
            "slow_call_duration_threshold_ms",
            "9223372036854775807",
        ),
        (
            "[breakers.p]\nmax_retry_after_hold_ms = 9223372036854775807\n",
            "max_retry_after_hold_ms",
            "9223372036854775807",
        ),
        (
            "[breakers.p]\nmax_retry_after_hold_ms = 0\n",
            "max_retry_after_hold_ms",
            "0",
        ),
        (
            "[breakers.p]\nfailure_rate_threshold = 150\n",
            "failure_rate_threshold",
            "150",
        ),
        (
            "[breakers.p]\nfailure_rate_threshold = nan\n",
            "failure_rate_threshold",
            "nan",
        ),
        (
            "[breakers.p]\nfailure_rate_threshold = -inf\n",
            "failure_rate_threshold",
            "-inf",
        ),
        (
            "[breakers.p]\nslow_call_rate_threshold = 0\n",
            "slow_call_rate_threshold",
            "0",
        ),
        (
            "[breakers.p]\nsliding_window_size = 0\n",
            "sliding_window_size",
            "0",
        ),
        (
            "[breakers.p]\nsliding_window_size = 99999999999\n",
            "sliding_window_size",
            "99999999999",
        ),
        (
            "[breakers.p]\nsliding_window_size = 99999999999999999999\n",
            "sliding_window_size",
            "99999999999999999999",
        ),
        (
            "[breakers.p]\nminimum_number_of_calls = -3\n",
            "minimum_number_of_calls",
            "-3",
        ),
        (
            "[breakers.p]\npermitted_number_of_calls_in_half_open_state = 0\n",
            "permitted_number_of_calls_in_half_open_state",
            "0",
        ),
        (
            "[breakers.p]\nsliding_window_type = \"sliding\"\n",
            "sliding_window_type",
            "\"sliding\"",
        ),
        (
            "[breakers.p]\ninitial_state = \"open\"\n",
            "initial_state",
            "\"open\"",
        ),
        ("[bulkheads.p]\nmax_concurrent = 0\n", "max_concurrent", "0"),
        (
            "[bulkheads.p]\nmax_concurrent = -1\n",
            "max_concurrent",
            "-1",
        ),
        (
            "[bulkheads.p]\nmax_wait_ms = 9223372036854775807\n",
            "max_wait_ms",
            "9223372036854775807",
        ),
        (
            "[bulkheads.p]\nmax_wait_ms = \"5s\"\n",
            "max_wait_ms",
            "\"5s\"",
        ),
        ("[budgets.p]\nratio = -0.1\n", "ratio", "-0.1"),
        ("[budgets.p]\nratio = 1001\n", "ratio", "1001"),
        ("[budgets.p]\nwindow_ms = 0\n", "window_ms", "0"),
        (
            "[budgets.p]\nwindow_ms = 9223372036854775807\n",
            "window_ms",
            "9223372036854775807",
        ),
        (
            "[budgets.p]\nmin_retries_per_second = 99999999999\n",
            "min_retries_per_second",
            "99999999999",
        ),
        ("[budgets.p]\nkind = \"leaky\"\n", "kind", "\"leaky\""),
        (
            "[budgets.p]\nkind = \"token_bucket\"\nmax_tokens = 0\n",
            "max_tokens",
            "0",
        ),
        (
            "[budgets.p]\nkind = \"token_bucket\"\ntoken_ratio = 0\n",
            "token_ratio",
            "0",
        ),
        ("[throttles.p]\nk = 0.5\n", "k", "0.5"),
        ("[throttles.p]\nwindow_ms = 0\n", "window_ms", "0"),
        (
            "[throttles.p]\nwindow_ms = 9223372036854775807\n",
            "window_ms",
            "9223372036854775807",
        ),
        (
            "[defaults.breaker]\nfailure_rate_threshold = 0\n",
            "failure_rate_threshold",
            "0",
        ),
        (
            "[defaults.bulkhead]\nmax_concurrent = 0\n",
            "max_concurrent",
            "0",
        ),
        (
            "[registry]\nunknown_names = \"strict\"\n",
            "unknown_names",
            "\"strict\"",
        ),
        ("[registry]\nstrict = true\n", "strict", "true"),
    ];
    for (text, key, value) in cases {
        assert_refused(text, key, value);
    }
}

#[test]
fn config_every_problem_reported_at_once_with_lines() {
    let text = "\
[breakers.payments]
failure_rate_threshold = 150
wait_duration_in_open_state_ms = -5
colour = \"red\"

[bulkheads.payments]
max_concurrent = 0
";
    let problems = problems_of(text);
    let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 4, "{shown:#?}");
    let lines: Vec<Option<usize>> = problems.iter().map(|p| p.line()).collect();
    assert_eq!(
        lines,
        vec![Some(2), Some(3), Some(4), Some(7)],
        "{shown:#?}"
    );
    for p in &problems {
        assert_eq!(p.name(), Some("payments"));
        assert!(p.table().is_some());
    }
}

#[test]
fn config_duplicates_and_bad_names_are_refused() {
    for text in [
        "[breakers.p]\nfailure_rate_threshold = 50\nfailure_rate_threshold = 60\n",
        "[breakers.p]\nfailure_rate_threshold = 50\n[breakers.p]\nminimum_number_of_calls = 5\n",
        "[breakers.p]\nfailure_rate_threshold = 50\n[breakers.\"p\"]\nminimum_number_of_calls = 5\n",
        "[breakers.\"payments \"]\nfailure_rate_threshold = 50\n",
        "[breakers.\"\"]\nfailure_rate_threshold = 50\n",
        "[breakers.\"pay/ments\"]\nfailure_rate_threshold = 50\n",
        "[breakers]\np = 5\n",
        "breakers = 5\n",
        "[breaker.p]\nfailure_rate_threshold = 50\n",
        "[breakers.p.q]\nfailure_rate_threshold = 50\n",
        "[breakers.p]\nsliding_window_size = [1, 2]\n",
        "[breakers.p]\nsliding_window_size = 1979-05-27\n",
        "[breakers.p]\nwait_duration_in_open_state_ms = { s = 1 }\n",
        "[defaults.breaker]\nfailure_rate_threshold = { a = 1 }\n",
        "[defaults.breakers]\nfailure_rate_threshold = 50\n",
        "not toml at all [[[",
    ] {
        let problems = problems_of(text);
        assert!(!problems.is_empty(), "accepted: {text}");
    }
}

#[test]
fn config_code_and_file_same_name_file_wins() {
    let registry = resilient::Registry::builder()
        .toml("[breakers.review43_win]\nfailure_rate_threshold = 20\n")
        .unwrap()
        .breaker(
            "review43_win",
            resilient::BreakerConfig::default().failure_rate_threshold(90.0),
        )
        .build()
        .unwrap();
    assert!(registry.breaker("review43_win").is_some());
}

#[resilient(breaker = "review43_strict_only")]
async fn uses_strict_name() -> Result<(), std::io::Error> {
    Ok(())
}

#[test]
fn config_strict_registry_names_a_missing_breaker_and_its_function() {
    let registry = resilient::Registry::builder()
        .toml("[registry]\nunknown_names = \"error\"\n")
        .unwrap()
        .build()
        .unwrap();
    assert!(registry.is_strict());
    let e = registry.check_names().unwrap_err();
    let text = e.to_string();
    assert!(text.contains("review43_strict_only"), "{text}");
    assert!(text.contains("uses_strict_name"), "{text}");
    let _ = uses_strict_name;
}

// ---------------------------------------------------------------------------
// More: the server's answers for a dependency's failures, the
// idempotency layer, and gRPC pushback out of the layer.
// ---------------------------------------------------------------------------

#[resilient(timeout_ms = 300)]
async fn plain_call(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

#[tokio::test]
async fn server_maps_dependency_failures_as_documented() {
    // (act, status, do-not-retry, retry-after)
    let cases: Vec<(Act, u16, bool, Option<&str>)> = vec![
        (Act::Status(404, vec![], "no".into()), 424, true, None),
        (Act::Status(422, vec![], "no".into()), 424, true, None),
        (Act::Status(401, vec![], "no".into()), 502, true, None),
        (status_ra(503, "2"), 503, false, Some("2")),
        (status_ra(429, "3"), 503, false, Some("3")),
        (Act::Status(500, vec![], "bug".into()), 502, true, None),
        (status(502), 502, false, None),
        (Act::Hang, 504, false, None),
    ];
    for (act, want, dnr, ra) in cases {
        let dep = raw(vec![act.clone()]).await;
        let url = dep.url();
        let router = Router::new()
            .route(
                "/x",
                get(move || {
                    let url = url.clone();
                    async move { plain_call(&client(), &url).await }
                }),
            )
            .layer(ResilienceLayer::new());
        let addr = serve(router).await;
        let r = client()
            .get(format!("http://{addr}/x"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), want, "{act:?}");
        assert_eq!(
            r.headers()["content-type"],
            "application/problem+json",
            "{act:?}"
        );
        assert_eq!(r.headers().get("do-not-retry").is_some(), dnr, "{act:?}");
        assert_eq!(
            r.headers().get("retry-after").map(|v| v.to_str().unwrap()),
            ra,
            "{act:?}"
        );
    }
}

use resilient::tower::IdempotencyLayer;

#[tokio::test]
async fn idempotency_layer_replays_and_refuses_as_documented() {
    let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let answers = Arc::new(Mutex::new(VecDeque::from(vec![503u16, 200])));
    let r2 = runs.clone();
    let router = Router::new()
        .route(
            "/pay",
            axum::routing::post(move |body: String| {
                let runs = r2.clone();
                let answers = answers.clone();
                async move {
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let code = answers.lock().unwrap().pop_front().unwrap_or(500);
                    (http::StatusCode::from_u16(code).unwrap(), body)
                }
            }),
        )
        .layer(IdempotencyLayer::new())
        .layer(ResilienceLayer::new());
    let addr = serve(router).await;
    let c = client();
    let url = format!("http://{addr}/pay");
    let key = IdempotencyKey::random();
    let send = |body: &'static str| c.post(&url).idempotency_key(&key).body(body).send();
    // 503: not kept, the retry runs.
    assert_eq!(send("a").await.unwrap().status(), 503);
    let r = send("a").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Replayed.
    let r = send("a").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(r.text().await.unwrap(), "a");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Another body: 422.
    assert_eq!(send("b").await.unwrap().status(), 422);
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Concurrent repeats of a new key run once.
    let key2 = IdempotencyKey::random();
    let mk = || c.post(&url).idempotency_key(&key2).body("z").send();
    let (x, y) = tokio::join!(mk(), mk());
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.status(), y.status());
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3);
    // A kept 500 replays with Do-Not-Retry and no Retry-After.
    let r = c
        .post(&url)
        .idempotency_key(&key2)
        .body("z")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["do-not-retry"], "?1");
    assert!(r.headers().get("retry-after").is_none());
}

#[resilient(retries = 1, base_ms = 1, cap_ms = 2, idempotent)]
async fn db_down() -> Result<(), Status> {
    Err(Status::unavailable("db down"))
}

#[tokio::test]
async fn grpc_server_that_retried_sends_pushback_minus_one_and_caller_stops() {
    // A handler that retries its own dependency and gives up.
    let seen: GrpcSeen = Arc::default();
    let svc = Scripted {
        inner: tower::service_fn(|_: http::Request<tonic::body::Body>| async {
            Ok::<_, std::convert::Infallible>(db_down().await.unwrap_err().into_http())
        }),
        script: Arc::default(),
        seen: seen.clone(),
    };
    let addr = grpc_serve(svc, ()).await;
    let e = grpc_check(grpc_client(addr)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert_eq!(
        e.metadata()
            .get("grpc-retry-pushback-ms")
            .map(|v| v.to_str().unwrap()),
        Some("-1")
    );
    assert_eq!(
        e.classify(),
        Classification::DoNotRetry { retry_after: None }
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "the caller did not retry");
}

// ---------------------------------------------------------------------------
// Breakers seen from the HTTP client.
// ---------------------------------------------------------------------------

fn registry_of(text: &str) -> resilient::Registry {
    resilient::Registry::builder()
        .toml(text)
        .unwrap()
        .build()
        .unwrap()
}

#[resilient(
    breaker = "review43_b",
    retries = 3,
    base_ms = 10,
    cap_ms = 20,
    deadline_ms = 5000,
    idempotent
)]
async fn guarded(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

const SMALL_BREAKER: &str = "[breakers.review43_b]\nsliding_window_size = 2\nminimum_number_of_calls = 2\nwait_duration_in_open_state_ms = 60000\n";

#[tokio::test]
async fn breaker_refusal_ends_the_retry_loop() {
    let registry = registry_of(SMALL_BREAKER);
    let server = raw(vec![status(502)]).await;
    let (result, _report) =
        resilient::observe(registry.scope(guarded(&client(), &server.url()))).await;
    let e = result.unwrap_err();
    assert_eq!(server.seen().len(), 2, "{e}");
    assert_eq!(
        e.refusal().map(|r| r.kind()),
        Some(resilient::ErrorKind::BreakerOpen)
    );
}

#[tokio::test]
async fn breaker_counts_500_and_do_not_retry_but_not_permanent() {
    // 404s: neither success nor failure; the breaker stays closed.
    let registry = registry_of(SMALL_BREAKER);
    let server = raw(vec![status(404)]).await;
    for _ in 0..4 {
        let e = registry
            .scope(guarded(&client(), &server.url()))
            .await
            .unwrap_err();
        assert!(e.refusal().is_none(), "{e}");
    }
    assert_eq!(server.seen().len(), 4);
    // 500s and marked 503s: failures, not retried.
    for act in [
        status(500),
        Act::Status(503, vec!["do-not-retry: ?1".into()], String::new()),
    ] {
        let registry = registry_of(SMALL_BREAKER);
        let server = raw(vec![act.clone()]).await;
        for _ in 0..2 {
            let e = registry
                .scope(guarded(&client(), &server.url()))
                .await
                .unwrap_err();
            assert!(e.refusal().is_none(), "{act:?}: {e}");
        }
        let e = registry
            .scope(guarded(&client(), &server.url()))
            .await
            .unwrap_err();
        assert_eq!(
            e.refusal().map(|r| r.kind()),
            Some(resilient::ErrorKind::BreakerOpen),
            "{act:?}"
        );
        assert_eq!(server.seen().len(), 2, "{act:?}");
    }
}

#[tokio::test]
async fn open_on_retry_after_with_an_http_date_admits_the_retry_that_waited() {
    let registry = registry_of("[breakers.review43_b]\nopen_on_retry_after = true\n");
    let when = http_date::format(std::time::SystemTime::now() + Duration::from_secs(2));
    let server = raw(vec![status_ra(503, &when), ok()]).await;
    let out = registry.scope(guarded(&client(), &server.url())).await;
    assert_eq!(out.unwrap(), "done");
    assert_eq!(server.seen().len(), 2);
}

#[resilient(deadline_ms = 3000)]
async fn first_ok(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

#[tokio::test]
async fn server_marks_may_have_taken_effect_when_a_call_acted_first() {
    let good = raw(vec![ok()]).await;
    let bad = raw(vec![Act::Status(404, vec![], "no".into())]).await;
    let (g, b) = (good.url(), bad.url());
    let router = Router::new()
        .route(
            "/x",
            get(move || {
                let (g, b) = (g.clone(), b.clone());
                async move {
                    let c = client();
                    first_ok(&c, &g).await?;
                    first_ok(&c, &b).await
                }
            }),
        )
        .layer(ResilienceLayer::new());
    let addr = serve(router).await;
    let r = client()
        .get(format!("http://{addr}/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 424);
    assert_eq!(r.headers()["may-have-taken-effect"], "?1");
    // The client sees it: not "certainly not done".
    let e: Error = {
        use resilient::reqwest::ResponseExt;
        r.check_status().await.unwrap_err()
    };
    assert!(e.may_have_taken_effect());
}

#[test]
fn config_error_lines_read_as_the_readme_shows() {
    let dir = std::env::temp_dir().join(format!("review43-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("resilience.toml");
    std::fs::write(
        &path,
        "[breakers.payments]\nsliding_window_size = 60\nminimum_number_of_calls = 20\nfailure_rate_threshold = 150\n",
    )
    .unwrap();
    let e = resilient::Registry::builder()
        .toml_file(&path)
        .unwrap()
        .build()
        .unwrap_err();
    let want = format!(
        "invalid resilience configuration\n  {}:4:1: [breakers.payments] breaker `payments`: `failure_rate_threshold` = 150: must be a percentage greater than 0 and at most 100",
        path.display()
    );
    assert_eq!(e.to_string(), want);
    assert_eq!(format!("{e:?}"), want, "Debug prints the same lines");
    std::fs::remove_dir_all(&dir).unwrap();
    // A missing file: an error naming it, not a panic.
    let e = resilient::Registry::builder()
        .toml_file(dir.join("missing.toml"))
        .unwrap_err();
    assert!(e.to_string().contains("missing.toml"), "{e}");
    // Names from code follow the same rule as names in files.
    let e = resilient::Registry::builder()
        .breaker("payments ", resilient::BreakerConfig::default())
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("payments "), "{e}");
    // The file's `unknown_names` overrides the code's `strict`.
    let r = resilient::Registry::builder()
        .strict(true)
        .toml("[registry]\nunknown_names = \"default\"\n")
        .unwrap()
        .build()
        .unwrap();
    assert!(!r.is_strict());
}
