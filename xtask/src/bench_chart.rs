//! `cargo xtask bench-chart SUMMARY.json OUT.png`: the chart of the workloads' table
//! (bench/gpu/workloads/table.py writes the summary): per workload, how many times faster
//! than as written each configuration ran (medians), by hand beside hotpin's first run and its
//! run from history. Drawn with plotters, as the HTML report's charts are; the text in DejaVu
//! Sans or Liberation Sans, read from the system.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use plotters::prelude::*;

#[derive(clap::Args)]
pub struct BenchChartArgs {
    /// The summary table.py wrote (summary.json).
    summary: PathBuf,
    /// The PNG to write.
    out: PathBuf,
    /// A line under the title: the device, the date, the command.
    #[arg(long, default_value = "")]
    caption: String,
}

/// The configurations drawn, in order, with their colours.
const BARS: [(&str, &str, RGBColor); 3] = [
    ("by-hand", "pinned by hand", RGBColor(0x99, 0x99, 0x99)),
    (
        "auto-first",
        "hotpin run, first run",
        RGBColor(0xe6, 0x9f, 0x00),
    ),
    (
        "auto-history",
        "hotpin run, from history",
        RGBColor(0x00, 0x72, 0xb2),
    ),
];
/// The fonts tried, in order (Debian's fonts-dejavu-core, or fonts-liberation2, which
/// chromium brings).
const FONTS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
];

pub fn run(args: BenchChartArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.summary)
        .with_context(|| format!("reading {}", args.summary.display()))?;
    let summary: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", args.summary.display()))?;
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    for w in summary.as_array().context("the summary is not a list")? {
        let name = w["workload"]
            .as_str()
            .context("a workload without a name")?;
        let seconds = &w["seconds"];
        let Some(plain) = seconds["plain"].as_f64() else {
            continue;
        };
        let speedups = BARS
            .iter()
            .map(|(key, _, _)| seconds[*key].as_f64().map_or(0.0, |s| plain / s))
            .collect();
        rows.push((name.to_owned(), speedups));
    }
    if rows.is_empty() {
        bail!(
            "{}: no workload with an as-written time",
            args.summary.display()
        );
    }
    let (path, font) = FONTS
        .iter()
        .find_map(|path| std::fs::read(path).ok().map(|font| (path, font)))
        .with_context(|| {
            format!("none of the fonts {FONTS:?} is here (apt-get install fonts-dejavu-core)")
        })?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(font.into()))
        .map_err(|_| anyhow::anyhow!("{path} is not a font plotters reads"))?;
    draw(&args, &rows).map_err(|e| anyhow::anyhow!("drawing the chart: {e}"))?;
    eprintln!("xtask: bench-chart: wrote {}", args.out.display());
    Ok(())
}

fn draw(
    args: &BenchChartArgs,
    rows: &[(String, Vec<f64>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let height = 120 + 70 * rows.len() as u32;
    let root = BitMapBackend::new(&args.out, (960, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = max_speedup(rows).max(1.0) * 1.12;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "times faster than the program as written (median)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(190)
        .build_cartesian_2d(0f64..top, 0f64..rows.len() as f64)?;
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len() * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 1e-6 && i < names.len() {
                names[names.len() - 1 - i].to_owned()
            } else {
                String::new()
            }
        })
        .x_label_formatter(&|x| format!("{x:.0}x"))
        .label_style(("sans-serif", 15))
        .draw()?;
    for (i, (_, speedups)) in rows.iter().enumerate() {
        let base = (rows.len() - 1 - i) as f64;
        for (j, ((_, _, colour), x)) in BARS.iter().zip(speedups).enumerate() {
            let y0 = base + 0.78 - 0.24 * (j as f64 + 1.0);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y0), (*x, y0 + 0.22)],
                colour.filled(),
            )))?;
            if *x > 0.0 {
                chart.draw_series(std::iter::once(Text::new(
                    format!("{x:.1}x"),
                    (*x + top * 0.006, y0 + 0.2),
                    ("sans-serif", 13),
                )))?;
            }
        }
    }
    // The as-written line, and the legend.
    chart.draw_series(LineSeries::new(
        [(1.0, 0.0), (1.0, rows.len() as f64)],
        BLACK,
    ))?;
    for (_, label, colour) in BARS {
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    if !args.caption.is_empty() {
        root.draw(&Text::new(
            args.caption.clone(),
            (12, height as i32 - 18),
            ("sans-serif", 13),
        ))?;
    }
    root.present()?;
    Ok(())
}

fn max_speedup(rows: &[(String, Vec<f64>)]) -> f64 {
    rows.iter()
        .flat_map(|(_, s)| s.iter().copied())
        .fold(0.0, f64::max)
}
