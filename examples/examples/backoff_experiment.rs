//! Marc Brooker's backoff-and-jitter experiment ("Exponential Backoff And
//! Jitter", AWS Architecture Blog, 2015), with every delay drawn from the
//! library's own `resilient::Backoff` (model and numbering of retries:
//! `resilient_examples::backoff_sim`).
//!
//! Prints, for N = 10 to 190 clients and each strategy, the median number of
//! writes (work) and the median time until the last client succeeded; shows
//! how much the medians move between k and 2k trials; and draws
//! `docs/results/backoff_work.png` and `docs/results/backoff_time.png`.
//!
//! Run with `cargo run --release -p resilient-examples --example backoff_experiment`
//! (optionally followed by `-- TRIALS`, the trials per cell; default 800).
//! Deterministic: every trial is seeded, so every run prints the same.

use std::path::PathBuf;

use resilient_examples::backoff_sim::{self, Cell, Strategy, Trial};
use resilient_examples::chart::{self, Panel, Series};

/// Trials per cell for the table and charts. The stability check printed
/// at the end shows why: at 800 the largest change of any cell's median
/// from 400 to 800 trials is about 1 %, and passing `1600` as the argument
/// shows under 1 % from 800 to 1600 (at 100 to 200 it is still up to 10 %).
const TRIALS: u32 = 800;
const CLIENTS: std::ops::RangeInclusive<u32> = 10..=190;
const STEP: usize = 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let trials: u32 = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|_| format!("trials per cell: expected a number, got {arg:?}"))?,
        None => TRIALS,
    };
    let clients: Vec<u32> = CLIENTS.step_by(STEP).collect();
    // runs[strategy][n] = every trial of that cell.
    let runs: Vec<Vec<Vec<Trial>>> = Strategy::ALL
        .iter()
        .map(|&s| {
            clients
                .iter()
                .map(|&n| backoff_sim::trials(s, n, trials))
                .collect()
        })
        .collect();
    let cells = |k: usize| -> Vec<Vec<Cell>> {
        Strategy::ALL
            .iter()
            .zip(&runs)
            .map(|(&s, per_n)| {
                clients
                    .iter()
                    .zip(per_n)
                    .map(|(&n, r)| backoff_sim::cell(s, n, r, k))
                    .collect()
            })
            .collect()
    };
    let table = cells(trials as usize);

    println!(
        "{}..={} clients contend on one row; base {:?}, cap {:?}; one-way delay |N(10 ms, 2 ms)|; \
         median of {trials} trials per cell.\n",
        CLIENTS.start(),
        CLIENTS.end(),
        backoff_sim::BASE,
        backoff_sim::CAP
    );
    let header: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
    println!("Work: writes until every client has written once (median)\n");
    println!("| N | {} |", header.join(" | "));
    println!("|---:|{}", "---:|".repeat(header.len()));
    for (i, n) in clients.iter().enumerate() {
        let row: Vec<String> = table
            .iter()
            .map(|c| format!("{:.0}", c[i].writes))
            .collect();
        println!("| {n} | {} |", row.join(" | "));
    }
    println!("\nTime until the last client succeeded, ms (median)\n");
    println!("| N | {} |", header.join(" | "));
    println!("|---:|{}", "---:|".repeat(header.len()));
    for (i, n) in clients.iter().enumerate() {
        let row: Vec<String> = table
            .iter()
            .map(|c| format!("{:.0}", c[i].time_ms))
            .collect();
        println!("| {n} | {} |", row.join(" | "));
    }

    println!(
        "\nHow stable the medians are: largest change of a cell's median from k to 2k trials\n"
    );
    println!("| k -> 2k | work | time |");
    println!("|---|---:|---:|");
    let mut k = 25usize;
    while 2 * k <= trials as usize {
        let (a, b) = (cells(k), cells(2 * k));
        let change = |f: fn(&Cell) -> f64| {
            a.iter()
                .flatten()
                .zip(b.iter().flatten())
                .map(|(x, y)| ((f(x) - f(y)).abs() / f(y), y.strategy.name(), y.clients))
                .fold((0.0, "", 0), |m, c| if c.0 > m.0 { c } else { m })
        };
        let (w, t) = (change(|c| c.writes), change(|c| c.time_ms));
        println!(
            "| {k} -> {} | {:.1} % ({}, N = {}) | {:.1} % ({}, N = {}) |",
            2 * k,
            100.0 * w.0,
            w.1,
            w.2,
            100.0 * t.0,
            t.1,
            t.2
        );
        k *= 2;
    }

    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/results");
    std::fs::create_dir_all(&out)?;
    let series = |f: fn(&Cell) -> f64| -> Vec<Series> {
        table
            .iter()
            .map(|cells| Series {
                name: cells[0].strategy.name().to_string(),
                points: cells.iter().map(|c| (f64::from(c.clients), f(c))).collect(),
            })
            .collect()
    };
    let panel = |title: &str, y: &str, log_y: bool, f: fn(&Cell) -> f64| Panel {
        title: title.to_string(),
        x_label: "clients contending (N)".to_string(),
        y_label: y.to_string(),
        log_y,
        shade: None,
        legend_right: false,
        series: series(f),
    };
    chart::draw(
        &out.join("backoff_work.png"),
        900,
        560,
        &[panel(
            "Work: writes until all N clients succeed (median)",
            "writes",
            false,
            |c| c.writes,
        )],
    )?;
    chart::draw(
        &out.join("backoff_time.png"),
        900,
        560,
        &[panel(
            "Time until the last client succeeds (median, log scale)",
            "milliseconds",
            true,
            |c| c.time_ms,
        )],
    )?;
    println!("\nCharts: docs/results/backoff_work.png, docs/results/backoff_time.png");
    Ok(())
}
