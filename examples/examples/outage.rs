//! The retry-storm experiment (Google SRE book, chapters 21 and 22): a
//! fleet of callers through four layered `#[resilient]` services over a
//! dependency that refuses fast, hangs, or is overloaded, in four
//! configurations (hand-written nested loops, the library's defaults, with
//! the retry budget, with breaker and budget). The model and its numbers are
//! in `resilient_examples::storm`.
//!
//! Prints the attempts one request makes through 1 to 4 nested layers,
//! then, per outage shape and configuration, the attempts reaching the
//! dependency per user request during the fault (mean, mean after warm-up,
//! worst) and the share of user requests that succeed during and after it;
//! draws `docs/results/retry_storm.png` (attempts per second over time).
//!
//! Run with `cargo run --release -p resilient-examples --example outage`.
//! Time is tokio's paused clock: every run prints the same, in seconds.

use std::path::PathBuf;

use resilient_examples::chart::{self, Panel, Series};
use resilient_examples::storm::{self, Config, Report, Shape};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "One user request over a dependency that refuses every call in 5 ms, through nested \
         layers of `retries = 3` (no timeout fires):\n"
    );
    println!("| layers | hand-written nested loops | `#[resilient]` |");
    println!("|---:|---:|---:|");
    for layers in 1..=4 {
        println!(
            "| {layers} | {} | {} |",
            storm::attempts_of_one_request(layers, true).await,
            storm::attempts_of_one_request(layers, false).await
        );
    }
    println!();

    let during = storm::Report::during();
    println!(
        "{} user requests/s for {} s through four layers (timeouts 5 s, 3 s, 2 s, 1 s outside-in, \
         deadline {} s at the top), each `retries = 3`; fault from {} s to {} s \
         (overloaded: {} requests/s during it, capacity {} calls/s).",
        storm::RATE,
        storm::RUN.as_secs(),
        storm::DEADLINE.as_secs(),
        storm::FAULT.start.as_secs(),
        storm::FAULT.end.as_secs(),
        storm::SURGE * storm::RATE,
        storm::CAPACITY * storm::RATE,
    );
    println!(
        "\"During\": user requests sent from {} s to {} s, whose whole life lies in the fault; \
         \"after warm-up\": from {} s; \"after\": sent from {} s to {} s.\n",
        during.start.as_secs(),
        during.end.as_secs(),
        (during.start + storm::WARM_UP).as_secs(),
        storm::FAULT.end.as_secs(),
        storm::RUN.as_secs(),
    );
    println!(
        "| dependency | configuration | attempts/request during: mean | after warm-up | \
         worst | succeeded during | succeeded after | all succeed again after |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let mut reports: Vec<Report> = Vec::new();
    for shape in Shape::ALL {
        for config in Config::ALL {
            let r = storm::run(shape, config).await;
            println!(
                "| {} | {} | {:.2} | {:.2} | {} | {:.0} % | {:.0} % | {} |",
                shape.name(),
                config.name(),
                r.mean_attempts_during(),
                r.mean_attempts_after_warm_up(),
                r.worst_attempts_during(),
                100.0 * r.success_during(),
                100.0 * r.success_after(),
                r.recovery()
                    .map_or("never".to_string(), |d| format!("{} s", d.as_secs())),
            );
            reports.push(r);
        }
    }

    let fault = storm::FAULT.start.as_secs_f64()..storm::FAULT.end.as_secs_f64();
    // Every line over the same seconds, so the panels share their time axis.
    let seconds = storm::RUN.as_secs() as usize;
    let panels: Vec<Panel> = Shape::ALL
        .iter()
        .map(|&shape| Panel {
            title: format!("Dependency {}: calls reaching it per second", shape.name()),
            x_label: "time (s)".to_string(),
            y_label: "calls/s (log scale; 0 on the axis)".to_string(),
            log_y: true,
            shade: Some((fault.clone(), "fault".to_string())),
            legend_right: true,
            series: reports
                .iter()
                .filter(|r| r.shape == shape)
                .map(|r| Series {
                    name: r.config.name().to_string(),
                    points: (0..seconds)
                        .map(|s| {
                            let n = r.attempts_per_second.get(s).copied().unwrap_or(0);
                            (s as f64 + 0.5, f64::from(n))
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/results");
    std::fs::create_dir_all(&out)?;
    chart::draw(&out.join("retry_storm.png"), 1000, 1300, &panels)?;
    println!("\nChart: docs/results/retry_storm.png");
    Ok(())
}
