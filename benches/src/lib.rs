//! Benchmarks live in `benches/`; run them with `cargo bench -p resilient-benches`.
//!
//! - `success_path` (criterion): a bare call against the same call through
//!   `#[resilient]`, with and without a circuit breaker, on one thread and on
//!   two threads sharing one breaker.
//! - `peers` (its own harness, built on this library): `resilient` next to
//!   tower, backon, failsafe, recloser and tower-resilience on the same
//!   operation, with the floors (a bare call, a clock read, an atomic RMW)
//!   and floor sketches (the same semantics written by hand, for speed),
//!   per-thread CPU time per call, allocations per call and the ratios the
//!   performance issue names. `benches/callgrind.sh` counts instructions per
//!   call of the same cases under valgrind, which a loaded machine does not
//!   disturb.
//!
//! The bodies complete on their first poll, so what is measured is the
//! wrapper's own cost: the clock reads, the breaker's atomics, the policy
//! lookup. Futures are polled by hand with a no-op waker inside a tokio
//! runtime context, so no scheduler cost is mixed in.
//!
//! This library holds what the `peers` harness needs that is not a case:
//! the clock, the sampling, the allocation count and the Markdown table.

use std::alloc::System;
use std::fmt::Write as _;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use cpu_time::ThreadTime;
#[cfg(target_os = "linux")]
use rustix::thread::CpuSet;
use stats_alloc::{Region, StatsAlloc};

/// Polls `fut` with a no-op waker until it is ready.
///
/// Every benchmarked body is ready on its first poll; the loop only matters
/// when two threads contend on a peer's asynchronous lock (tower-resilience's
/// breaker takes a `tokio::sync::Mutex`), where a poll may return `Pending`
/// until the other thread lets go. No waker is needed for that: the next
/// poll finds the lock free.
#[inline]
pub fn poll_to_end<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::hint::spin_loop();
    }
}

/// How long and how often to sample.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// CPU time spent calling before the first sample (caches, branch
    /// predictors, lazily created state, the CPU's frequency).
    pub warm_up: Duration,
    /// CPU time one sample aims at. The thread CPU clock ticks in
    /// nanoseconds, but a read of it is a system call (the vDSO does not
    /// serve it), so a sample must be long next to that.
    pub sample: Duration,
    /// Samples per case; the figure reported is their median.
    pub samples: usize,
    /// Samples per thread when two threads run a case: shorter and more,
    /// since only those taken while both threads were on a CPU count, and
    /// on a loaded machine short windows are what two threads share.
    pub two_thread_samples: usize,
    /// CPU time one two-thread sample aims at.
    pub two_thread_sample: Duration,
    /// Whether this is the smoke run's setting (said in the output).
    pub quick: bool,
}

impl Settings {
    /// The full run: 1 ms samples, 201 of them (20001 of 100 µs per thread
    /// on two threads), after 200 ms of warm-up.
    pub const FULL: Settings = Settings {
        warm_up: Duration::from_millis(200),
        sample: Duration::from_millis(1),
        samples: 201,
        two_thread_samples: 20001,
        two_thread_sample: Duration::from_micros(100),
        quick: false,
    };

    /// A smoke run (`PEERS_QUICK=1`): every case, few samples. The figures
    /// are noisier; the table's shape and the allocation counts hold.
    pub const QUICK: Settings = Settings {
        warm_up: Duration::from_millis(10),
        sample: Duration::from_micros(200),
        samples: 11,
        two_thread_samples: 501,
        two_thread_sample: Duration::from_micros(50),
        quick: true,
    };

    /// `QUICK` when the environment variable `PEERS_QUICK` is set to
    /// anything but `0` or empty, `FULL` otherwise.
    pub fn from_env() -> Settings {
        match std::env::var("PEERS_QUICK") {
            Ok(v) if !v.is_empty() && v != "0" => Settings::QUICK,
            _ => Settings::FULL,
        }
    }
}

/// One sample: when it ran (wall clock) and the CPU time it took.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Wall-clock start.
    pub start: Instant,
    /// Wall-clock end.
    pub end: Instant,
    /// CPU nanoseconds of the calling thread over the sample.
    pub cpu_ns: f64,
    /// CPU nanoseconds per call.
    pub ns_per_call: f64,
}

impl Sample {
    fn wall_ns(&self) -> f64 {
        (self.end - self.start).as_nanos() as f64
    }

    /// The thread was on a CPU for nearly all of the sample.
    pub fn on_cpu(&self) -> bool {
        self.cpu_ns >= 0.9 * self.wall_ns()
    }
}

/// What one thread measured for one case.
#[derive(Debug, Clone, Default)]
pub struct Timing {
    /// Median over the samples of CPU nanoseconds per call.
    pub median_ns: f64,
    /// Fastest sample, CPU nanoseconds per call: the least disturbed by
    /// other processes sharing the core.
    pub min_ns: f64,
    /// Calls per sample (chosen during warm-up so a sample lasts about
    /// `Settings::sample`).
    pub iters_per_sample: u64,
    /// Heap allocations per call, counted over one sample's worth of calls
    /// after warm-up (only meaningful when no other thread allocates).
    pub allocs_per_call: f64,
    /// Every sample, in the order taken.
    pub samples: Vec<Sample>,
}

/// The median of `xs` (the mean of the middle two of an even count: of
/// two processes per CPU, neither the slower nor the faster), `NaN` if
/// empty.
pub fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// How many of the threads ran at once, on average, while they sampled:
/// their CPU time over the wall-clock time from the first start to the last
/// end. `2.0` means two threads on two cores the whole time; near `1.0` or
/// below, they mostly took turns with each other and other processes, and
/// met less contention than on a quiet machine.
pub fn parallelism(timings: &[Timing]) -> f64 {
    let all = timings.iter().flat_map(|t| t.samples.iter());
    let cpu: f64 = all.clone().map(|s| s.cpu_ns).sum();
    let start = all.clone().map(|s| s.start).min();
    let end = all.map(|s| s.end).max();
    match (start, end) {
        (Some(s), Some(e)) if e > s => cpu / (e - s).as_nanos() as f64,
        _ => f64::NAN,
    }
}

/// The samples of `mine` taken while the other thread was running too:
/// `mine`'s sample was on a CPU for 90 % of its wall time, and samples of
/// `other`'s that were on a CPU cover 90 % of that wall time. On a machine
/// whose cores are taken by other processes, these are the samples that
/// saw the contention two threads cause; their median is the two-thread
/// figure, reported with their count.
pub fn concurrent_samples(mine: &Timing, other: &Timing) -> Vec<f64> {
    let running: Vec<&Sample> = other.samples.iter().filter(|s| s.on_cpu()).collect();
    mine.samples
        .iter()
        .filter(|s| s.on_cpu())
        .filter(|s| {
            let covered: f64 = running
                .iter()
                .map(|o| {
                    let from = o.start.max(s.start);
                    let to = o.end.min(s.end);
                    if to > from {
                        (to - from).as_nanos() as f64
                    } else {
                        0.0
                    }
                })
                .sum();
            covered >= 0.9 * s.wall_ns()
        })
        .map(|s| s.ns_per_call)
        .collect()
}

fn cpu_ns(since: &ThreadTime) -> f64 {
    since.elapsed().as_nanos() as f64
}

/// [`measure`]'s `sync` phases, in order.
pub const WARM_UP: u8 = 0;
/// After the warm-up, before the allocation count.
pub const WARMED: u8 = 1;
/// After the allocation count.
pub const COUNTED: u8 = 2;
/// Before the samples.
pub const SAMPLES: u8 = 3;
/// Before each sample.
pub const SAMPLE: u8 = 4;
/// After each sample.
pub const SAMPLED: u8 = 5;

/// Threads that take turns, round after round: thread `k` of `n` goes
/// once thread `k - 1` has passed (thread 0 first, then after thread
/// `n - 1`). Each thread must take as many turns as the others. Only the
/// next thread is woken at each pass, so that a pass costs the same for
/// any number of threads.
#[derive(Debug)]
pub struct Turns {
    /// Per thread: whether its turn has come, and where it waits for it.
    slots: Vec<(Mutex<bool>, Condvar)>,
}

impl Turns {
    /// Turns for `n` threads.
    pub fn new(n: usize) -> Turns {
        Turns {
            slots: (0..n)
                .map(|k| (Mutex::new(k == 0), Condvar::new()))
                .collect(),
        }
    }

    /// Waits for thread `k`'s turn.
    pub fn wait(&self, k: usize) {
        let (mine, woken) = &self.slots[k];
        let mut go = mine.lock().unwrap_or_else(PoisonError::into_inner);
        while !*go {
            go = woken.wait(go).unwrap_or_else(PoisonError::into_inner);
        }
        *go = false;
    }

    /// Ends thread `k`'s turn: the next thread goes.
    pub fn pass(&self, k: usize) {
        let (next, woken) = &self.slots[(k + 1) % self.slots.len()];
        *next.lock().unwrap_or_else(PoisonError::into_inner) = true;
        woken.notify_one();
    }
}

/// Warms `call` up for `warm_up`, then returns the median and minimum CPU
/// time per call over `samples` samples of about `sample` each, and the
/// allocations per call seen by `alloc` over one sample's worth of calls.
///
/// `sync(phase)` runs at these points: [`WARM_UP`] before the warm-up;
/// [`WARMED`] after it, before the allocation count; [`COUNTED`] after
/// that; [`SAMPLES`] before the samples; [`SAMPLE`] and [`SAMPLED`] before
/// and after each sample. Two threads sharing a case use it (a barrier) to
/// count allocations and to sample at the same time; cases taking turns
/// ([`Turns`]) to take one step each in turn.
pub fn measure<F: FnMut(u64) -> u64>(
    warm_up: Duration,
    sample: Duration,
    samples: usize,
    alloc: &'static StatsAlloc<System>,
    sync: &dyn Fn(u8),
    mut call: F,
) -> Timing {
    // Warm up, and learn roughly what a call costs.
    sync(WARM_UP);
    let warm = ThreadTime::now();
    let mut calls = 0u64;
    let warm_ns = warm_up.as_nanos() as f64;
    loop {
        for i in 0..1000 {
            black_box(call(black_box(i)));
        }
        calls += 1000;
        if cpu_ns(&warm) >= warm_ns {
            break;
        }
    }
    let per_call = (cpu_ns(&warm) / calls as f64).max(0.1);
    let iters = ((sample.as_nanos() as f64 / per_call) as u64).max(100);
    // Made before the allocation count: with two threads the count is
    // read after `COUNTED`, while the other thread may already be past it
    // (made after, it was counted as one of the calls' allocations).
    let mut taken = Vec::with_capacity(samples);

    sync(WARMED);
    let region = Region::new(alloc);
    for i in 0..iters {
        black_box(call(black_box(i)));
    }
    let allocs = region.change().allocations as f64 / iters as f64;
    sync(COUNTED);

    sync(SAMPLES);
    for j in 0..samples {
        sync(SAMPLE);
        let start = Instant::now();
        let t = ThreadTime::now();
        // Each sample at another depth of the stack (see `at_depth`).
        at_depth(j % STACK_OFFSETS, &mut || {
            for i in 0..iters {
                black_box(call(black_box(i)));
            }
        });
        let cpu = cpu_ns(&t);
        let end = Instant::now();
        sync(SAMPLED);
        taken.push(Sample {
            start,
            end,
            cpu_ns: cpu,
            ns_per_call: cpu / iters as f64,
        });
    }
    let per_call: Vec<f64> = taken.iter().map(|s| s.ns_per_call).collect();
    Timing {
        median_ns: median(per_call.clone()),
        min_ns: per_call.iter().copied().fold(f64::INFINITY, f64::min),
        iters_per_sample: iters,
        allocs_per_call: allocs,
        samples: taken,
    }
}

/// How many stack depths [`measure`]'s samples rotate through.
pub const STACK_OFFSETS: usize = 16;

/// Runs `f` `depth` frames deeper on the stack (each frame of one fixed
/// size, a few dozen bytes).
///
/// The samples of [`measure`] rotate through [`STACK_OFFSETS`] depths, so
/// that a median is not that of one placement of the stack. (On the AMD
/// machine of the README's tables, two speeds of the same binary were
/// first read as placement; they turned out to follow what the host ran
/// beside each virtual CPU. The rotation stays: a median over sixteen placements of
/// the stack is no worse than one over a single placement, and
/// `PEERS_PAD` runs a case at one chosen depth.)
#[inline(never)]
pub fn at_depth(depth: usize, f: &mut dyn FnMut()) {
    if depth == 0 {
        return f();
    }
    let frame = [0u8; 64];
    black_box(&frame);
    at_depth(depth - 1, f);
    black_box(&frame);
}

/// The CPUs this process may run on (its affinity mask), in order; none
/// where this harness cannot pin (off Linux).
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    #[cfg(target_os = "linux")]
    {
        let set = rustix::thread::sched_getaffinity(None)?;
        Ok((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
    }
    #[cfg(not(target_os = "linux"))]
    Ok(Vec::new())
}

/// Pins the calling thread to `cpu`; threads it starts afterwards inherit
/// that.
///
/// On the README's machine the same code ran at one of two speeds, as the
/// host's other work came and went: for a while only on CPU 1, later on
/// both CPUs. A thread free to move met both speeds in proportions that
/// changed from one run to the next; pinned, a figure is of one CPU, and a
/// table can show whether the CPUs differ.
pub fn pin_to(cpu: usize) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let mut set = CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set)?;
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("pinning to CPU {cpu}: only on Linux"),
    ))
}

/// Runs `call` exactly `iters` times, for an instruction count under
/// callgrind: the same loop as [`measure`]'s samples, with nothing else.
pub fn run_iters<F: FnMut(u64) -> u64>(iters: u64, mut call: F) -> u64 {
    let mut sum = 0u64;
    for i in 0..iters {
        sum = sum.wrapping_add(black_box(call(black_box(i))));
    }
    sum
}

/// The machine the figures come from: CPU model and logical CPUs.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cpus} logical CPUs")
}

/// The version of each of `crates` that `lockfile` (a `Cargo.lock`) pins,
/// as `name version` pairs joined by commas; a crate locked at several
/// versions shows all of them.
pub fn locked_versions(lockfile: &str, crates: &[&str]) -> String {
    let mut found: Vec<(String, String)> = Vec::new();
    let mut name = None;
    for line in lockfile.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"'));
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take())
            && crates.contains(&n)
        {
            found.push((n.to_owned(), v.trim_matches('"').to_owned()));
        }
    }
    let mut out = String::new();
    for c in crates {
        for (n, v) in found.iter().filter(|(n, _)| n == c) {
            if !out.is_empty() {
                out.push_str(", ");
            }
            let _ = write!(out, "{n} {v}");
        }
    }
    out
}

/// A Markdown table built row by row; printed as is on the terminal too,
/// since pipe tables read well as plain text.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles; a title starting with `>` is
    /// right-aligned (numbers), the `>` is not shown.
    pub fn new(columns: &[&str]) -> Table {
        Table {
            header: columns
                .iter()
                .map(|c| c.trim_start_matches('>').to_owned())
                .collect(),
            right: columns.iter().map(|c| c.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing cells are left empty.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as GitHub-flavoured Markdown, columns padded to line up.
    pub fn markdown(&self) -> String {
        let n = self.header.len();
        let cell = |row: &Vec<String>, i: usize| row.get(i).cloned().unwrap_or_default();
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, w) in width.iter_mut().enumerate() {
                *w = (*w).max(cell(row, i).chars().count()).max(3);
            }
        }
        let line = |cells: Vec<String>| {
            let mut s = String::from("|");
            for (i, c) in cells.iter().enumerate() {
                let pad = width[i].saturating_sub(c.chars().count());
                if self.right[i] {
                    let _ = write!(s, " {}{} |", " ".repeat(pad), c);
                } else {
                    let _ = write!(s, " {}{} |", c, " ".repeat(pad));
                }
            }
            s.push('\n');
            s
        };
        let mut out = line(self.header.clone());
        let rule = (0..n)
            .map(|i| {
                let dashes = "-".repeat(width[i].saturating_sub(1));
                if self.right[i] {
                    format!("{dashes}:")
                } else {
                    format!("{dashes}-")
                }
            })
            .collect();
        out.push_str(&line(rule));
        for row in &self.rows {
            out.push_str(&line((0..n).map(|i| cell(row, i)).collect()));
        }
        out
    }
}

/// `x` with as many decimals as its size deserves: `0.4`, `12.3`, `123`.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        "-".to_owned()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A ratio written `0.62x`.
pub fn fmt_ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}x")
    } else {
        "-".to_owned()
    }
}
