//! PNG line charts for the experiments, drawn with `plotters`.
//!
//! Text is drawn with DejaVu Sans, shipped in `examples/fonts/` with its
//! license and registered from bytes, so the charts build and render the
//! same on a fresh machine with no font installed.

use std::error::Error;
use std::ops::Range;
use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;

const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// Line colours, one per series, readable on white and by most colour-blind
/// readers (the Okabe-Ito palette).
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(0, 0, 0),
    RGBColor(213, 94, 0),
    RGBColor(0, 114, 178),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
];

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_err() {
            panic!("examples/fonts/DejaVuSans.ttf is not a valid font");
        }
    });
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Its legend.
    pub name: String,
    /// Its points, in order of `x`.
    pub points: Vec<(f64, f64)>,
}

/// One panel: axes, lines and an optional shaded band of `x`.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// Label of the horizontal axis.
    pub x_label: String,
    /// Label of the vertical axis.
    pub y_label: String,
    /// Whether the vertical axis is logarithmic.
    pub log_y: bool,
    /// A band of `x` to shade (a fault window), with its legend.
    pub shade: Option<(Range<f64>, String)>,
    /// Whether the legend goes in the upper right corner (else upper left).
    pub legend_right: bool,
    /// The lines.
    pub series: Vec<Series>,
}

fn x_range(panel: &Panel) -> Range<f64> {
    let xs = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    lo..hi
}

fn y_max(panel: &Panel) -> f64 {
    let ys = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    ys.fold(0.0, f64::max)
}

fn y_min_positive(panel: &Panel) -> f64 {
    let ys = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    ys.filter(|y| *y > 0.0).fold(f64::MAX, f64::min)
}

/// Draws `panels` stacked vertically into a PNG of `width` x `height` at
/// `path`.
pub fn draw(path: &Path, width: u32, height: u32, panels: &[Panel]) -> Result<(), Box<dyn Error>> {
    register_font();
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((panels.len(), 1));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    root.present()?;
    Ok(())
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    panel: &Panel,
) -> Result<(), Box<dyn Error>> {
    let x = x_range(panel);
    // Head room above the lines for the legend: half as many decades again on a
    // log scale, a third more on a linear one.
    let top = if panel.log_y {
        let low = y_min_positive(panel).max(1e-3);
        let high = y_max(panel);
        high * (high / low).powf(0.5).max(2.0)
    } else {
        y_max(panel) * 1.35
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(90);
    if panel.log_y {
        // Zeros cannot be drawn on a log scale: when there are any, they sit
        // on the bottom axis, at 1 (or half the smallest value, if smaller).
        let has_zero = panel
            .series
            .iter()
            .any(|s| s.points.iter().any(|p| p.1 <= 0.0));
        let half_smallest = (y_min_positive(panel) / 2.0).max(1e-3);
        let bottom = if has_zero {
            half_smallest.min(1.0)
        } else {
            half_smallest
        };
        let mut chart = builder.build_cartesian_2d(x.clone(), (bottom..top).log_scale())?;
        chart
            .configure_mesh()
            .x_desc(&panel.x_label)
            .y_desc(&panel.y_label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style((FAMILY, 15))
            .axis_desc_style((FAMILY, 16))
            .draw()?;
        if let Some((band, name)) = &panel.shade {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(band.start, bottom), (band.end, top)],
                    RGBColor(230, 230, 230).filled(),
                )))?
                .label(name.as_str())
                .legend(|(x, y)| {
                    Rectangle::new(
                        [(x, y - 6), (x + 20, y + 6)],
                        RGBColor(230, 230, 230).filled(),
                    )
                });
        }
        for (i, s) in panel.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            // Earlier lines wider, so a line another one covers still shows.
            let width = 6u32.saturating_sub(i as u32).max(2);
            let points = s.points.iter().map(|&(x, y)| (x, y.max(bottom)));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(width)))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(width))
                });
        }
        legend(&mut chart, panel.legend_right)?;
    } else {
        let mut chart = builder.build_cartesian_2d(x.clone(), 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc(&panel.x_label)
            .y_desc(&panel.y_label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style((FAMILY, 15))
            .axis_desc_style((FAMILY, 16))
            .draw()?;
        if let Some((band, name)) = &panel.shade {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(band.start, 0.0), (band.end, top)],
                    RGBColor(230, 230, 230).filled(),
                )))?
                .label(name.as_str())
                .legend(|(x, y)| {
                    Rectangle::new(
                        [(x, y - 6), (x + 20, y + 6)],
                        RGBColor(230, 230, 230).filled(),
                    )
                });
        }
        for (i, s) in panel.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            // Earlier lines wider, so a line another one covers still shows.
            let width = 6u32.saturating_sub(i as u32).max(2);
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(width),
                ))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(width))
                });
        }
        legend(&mut chart, panel.legend_right)?;
    }
    Ok(())
}

fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    right: bool,
) -> Result<(), Box<dyn Error>>
where
    DB: DrawingBackend + 'a,
    CT: plotters::coord::CoordTranslate,
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(if right {
            SeriesLabelPosition::UpperRight
        } else {
            SeriesLabelPosition::UpperLeft
        })
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 15))
        .draw()?;
    Ok(())
}
