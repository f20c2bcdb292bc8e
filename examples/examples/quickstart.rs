//! A first example (the README's main one is `payments`): a quote service
//! and a payment service on loopback
//! that fail the first few requests, and annotated clients that retry them.
//! Prints each attempt as it happens.
//!
//! Run with `cargo run -p resilient-examples --example quickstart`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::{Classification, Classify, IdempotencyKey, resilient};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// What the client can fail with.
#[derive(Debug)]
enum ClientError {
    /// The connection failed or was cut: worth another attempt.
    Io(std::io::Error),
    /// The server is overloaded and said when to come back.
    Busy { retry_after: Duration },
    /// The server refused the request itself: retrying cannot help.
    Rejected(String),
    /// A refusal by `resilient` (deadline passed, attempt timed out).
    Resilience(resilient::Error),
}

impl From<resilient::Error> for ClientError {
    fn from(e: resilient::Error) -> Self {
        ClientError::Resilience(e)
    }
}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Io(e)
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "connection failed: {e}"),
            ClientError::Busy { retry_after } => {
                write!(f, "server busy, retry after {retry_after:?}")
            }
            ClientError::Rejected(reply) => write!(f, "server rejected the request: {reply}"),
            ClientError::Resilience(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl Classify for ClientError {
    fn classify(&self) -> Classification {
        match self {
            ClientError::Io(e) => e.classify(),
            ClientError::Busy { retry_after } => Classification::Throttled {
                retry_after: Some(*retry_after),
            },
            ClientError::Rejected(_) => Classification::Permanent,
            ClientError::Resilience(e) => e.classify(),
        }
    }
}

struct Client {
    addr: SocketAddr,
    started: Instant,
    attempt: AtomicU32,
}

impl Client {
    fn log(&self, what: &str) {
        let n = self.attempt.fetch_add(1, Ordering::SeqCst) + 1;
        let at = self.started.elapsed().as_millis();
        // Inside an attempt, the task's deadline is the sooner of the call's
        // deadline and the attempt's timeout.
        let left = resilient::remaining().map_or("no deadline".into(), |d| {
            format!("{} ms left", d.as_millis())
        });
        println!("  attempt {n} at {at:>5} ms: {what} ({left})");
    }

    /// One request, one line back, over a fresh connection.
    async fn request(&self, line: &str) -> Result<String, ClientError> {
        let mut stream = TcpStream::connect(self.addr).await?;
        stream.write_all(format!("{line}\n").as_bytes()).await?;
        let mut reply = String::new();
        let n = BufReader::new(stream).read_line(&mut reply).await?;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into());
        }
        let reply = reply.trim_end().to_owned();
        match reply.split_once(' ') {
            Some(("OK", body)) => Ok(body.to_owned()),
            Some(("BUSY", secs)) => Err(ClientError::Busy {
                retry_after: Duration::from_millis(secs.parse().unwrap_or(1000)),
            }),
            _ => Err(ClientError::Rejected(reply)),
        }
    }

    /// Reading a quote is harmless to repeat: `idempotent`.
    #[resilient(retries = 4, idempotent, deadline_ms = 5000, timeout_ms = 500)]
    async fn fetch_quote(&self, id: u32) -> Result<String, ClientError> {
        self.log("GET quote");
        self.request(&format!("QUOTE {id}")).await
    }

    /// Charging is not: the key makes a repeat recognisable to the server.
    #[resilient(retries = 3, deadline_ms = 5000, timeout_ms = 500)]
    async fn charge(&self, key: &IdempotencyKey, cents: u64) -> Result<String, ClientError> {
        self.log("POST charge");
        self.request(&format!("CHARGE {key} {cents}")).await
    }
}

/// A server that misbehaves on purpose: it drops the first quote request,
/// stalls the second past the client's timeout, answers the third with
/// `BUSY 300` (come back in 300 ms), and then serves. Charges are applied
/// once per idempotency key; the first one is applied but its reply is lost.
async fn serve(listener: TcpListener) {
    let quotes = Arc::new(AtomicU32::new(0));
    let charges: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let charge_requests = Arc::new(AtomicU32::new(0));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let (quotes, charges, charge_requests) =
            (quotes.clone(), charges.clone(), charge_requests.clone());
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            if BufReader::new(read).read_line(&mut line).await.is_err() {
                return;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let reply = match words.as_slice() {
                ["QUOTE", id] => match quotes.fetch_add(1, Ordering::SeqCst) {
                    0 => return, // drop the connection without a word
                    1 => {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        return;
                    }
                    2 => "BUSY 300".to_owned(),
                    _ => format!("OK quote #{id}: 42.00 EUR"),
                },
                ["CHARGE", key, cents] => {
                    let receipt = charges
                        .lock()
                        .unwrap()
                        .entry((*key).to_owned())
                        .or_insert_with(|| {
                            println!("  server: charging {cents} cents under key {key}");
                            format!("receipt for {cents} cents")
                        })
                        .clone();
                    if charge_requests.fetch_add(1, Ordering::SeqCst) == 0 {
                        return; // applied, but the reply is lost
                    }
                    format!("OK {receipt}")
                }
                _ => "ERR bad request".to_owned(),
            };
            let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(serve(listener));
    println!("flaky server on {addr}");

    let client = Client {
        addr,
        started: Instant::now(),
        attempt: AtomicU32::new(0),
    };

    println!("fetch_quote (retries = 4, idempotent, deadline 5 s, timeout 500 ms):");
    let quote = client.fetch_quote(7).await;
    match &quote {
        Ok(q) => println!("  => {q}"),
        Err(e) => println!("  => failed: {e}"),
    }

    println!("charge (retries = 3, one idempotency key for every attempt):");
    client.attempt.store(0, Ordering::SeqCst);
    let key = IdempotencyKey::random();
    let receipt = client.charge(&key, 1250).await;
    match &receipt {
        Ok(r) => println!("  => {r} (charged once, though sent twice)"),
        Err(e) => println!("  => failed: {e}"),
    }

    println!("a request the server rejects is not retried:");
    client.attempt.store(0, Ordering::SeqCst);
    #[resilient(retries = 3, idempotent)]
    async fn bad(client: &Client) -> Result<String, ClientError> {
        client.log("BAD");
        client.request("NONSENSE").await
    }
    match bad(&client).await {
        Ok(v) => println!("  => unexpected success: {v}"),
        Err(e) => println!("  => {e}"),
    }

    server.abort();
    quote?;
    receipt?;
    Ok(())
}
