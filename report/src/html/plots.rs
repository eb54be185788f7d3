//! The HTML report's charts, drawn with plotters as SVG: the pinned memory over time, each hot
//! allocation's copies over time, and what pinning each call site saves against what it
//! costs. What they show is computed before (`html::Charts`, the report's site advice); this
//! module only draws it. Text is laid out by plotters' estimate (no font files are read), and
//! the browser renders it.

use plotters::{
    coord::Shift,
    prelude::{
        AreaSeries, ChartBuilder, Circle, DrawingArea, DrawingAreaErrorKind, IntoDrawingArea,
        IntoFont, IntoLogRange, LineSeries, RGBColor, Rectangle, SVGBackend, ShapeStyle, Text,
        WHITE,
    },
    style::Color,
};

use crate::{bytes, seconds};

/// Every chart's width, in SVG user units (the page scales it to its width).
pub const WIDTH: u32 = 1000;
/// The line, area and bar colour, and the colour of what does not pay.
const INK: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
const LOSS: RGBColor = RGBColor(0xc0, 0x39, 0x2b);
const FONT: (&str, u32) = ("sans-serif", 13);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// Draws `draw` on an SVG of `WIDTH` x `height`; the SVG, or why it could not be drawn.
fn svg(height: u32, draw: impl FnOnce(&Area) -> Drawn) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        draw(&root).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The pinned host memory over `span_s` seconds: a step function of `(seconds, bytes)`,
/// its area filled, up to `peak` bytes.
pub fn pinned(points: &[(f64, u64)], span_s: f64, peak: u64) -> Result<String, String> {
    let mut steps: Vec<(f64, f64)> = Vec::with_capacity(points.len() * 2 + 1);
    for &(at, pinned) in points {
        if let Some(&(_, before)) = steps.last() {
            steps.push((at, before));
        }
        steps.push((at, pinned as f64));
    }
    if let Some(&(_, last)) = steps.last() {
        steps.push((span_s, last));
    }
    let top = peak.max(1) as f64 * 1.05;
    svg(260, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..span_s.max(1e-9), 0f64..top)?;
        chart
            .configure_mesh()
            .x_labels(5)
            .y_labels(3)
            .x_label_formatter(&|s| seconds(*s))
            .y_label_formatter(&|b| bytes(*b as u64))
            .label_style(FONT.into_font())
            .max_light_lines(0)
            .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
            .draw()?;
        chart.draw_series(
            AreaSeries::new(steps, 0.0, INK.mix(0.2)).border_style(ShapeStyle::from(INK)),
        )?;
        Ok(())
    })
}

/// One row of the copies chart: its label, and its bars `(from s, to s, bytes)`.
pub struct CopyBars {
    pub label: String,
    pub bars: Vec<(f64, f64, u64)>,
}

/// Height of one row of the copies chart.
const ROW: u32 = 22;
/// Width of the row labels before the plot.
const LABELS: u32 = 340;

/// When each hot allocation was copied: a row each, a bar per interval with copies, as high
/// as its bytes against `most`, over `span_s` seconds.
pub fn copies(rows: &[CopyBars], span_s: f64, most: u64) -> Result<String, String> {
    let height = 40 + ROW * rows.len() as u32;
    let count = rows.len().max(1) as f64;
    svg(height, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(6)
            .x_label_area_size(30)
            .y_label_area_size(LABELS)
            .build_cartesian_2d(0f64..span_s.max(1e-9), 0f64..count)?;
        chart
            .configure_mesh()
            .x_labels(5)
            .disable_y_mesh()
            .disable_y_axis()
            .x_label_formatter(&|s| seconds(*s))
            .label_style(FONT.into_font())
            .max_light_lines(0)
            .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
            .draw()?;
        for (i, row) in rows.iter().enumerate() {
            // Most transferred on top.
            let base = count - 1.0 - i as f64;
            chart.draw_series(row.bars.iter().map(|&(from, to, b)| {
                let high = (0.8 * b as f64 / most.max(1) as f64).max(0.08);
                Rectangle::new(
                    [(from, base + 0.05), (to, base + 0.05 + high)],
                    INK.filled(),
                )
            }))?;
            let (_, y) = chart.backend_coord(&(0.0, base + 0.3));
            root.draw(&Text::new(row.label.clone(), (8, y - 4), FONT.into_font()))?;
        }
        Ok(())
    })
}

/// One call site on the saving-against-cost chart.
pub struct SitePoint {
    pub label: String,
    pub saving_s: f64,
    pub cost_s: f64,
}

/// What pinning each call site saves against what it costs, both in seconds, on log scales:
/// above the diagonal pinning pays. The `labelled` most saving are named.
pub fn saving_against_cost(sites: &[SitePoint], labelled: usize) -> Result<String, String> {
    let floor: f64 = 1e-7;
    let values = sites
        .iter()
        .flat_map(|s| [s.saving_s, s.cost_s])
        .filter(|v| *v > 0.0);
    let (lo, hi) = values.fold((f64::MAX, floor), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = ((lo.min(hi) / 2.0).max(floor), hi * 2.0);
    let mut order: Vec<&SitePoint> = sites.iter().collect();
    order.sort_by(|a, b| b.saving_s.total_cmp(&a.saving_s));
    svg(420, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("what pinning costs")
            .y_desc("copy time it saves")
            .x_label_formatter(&|s| seconds(*s))
            .y_label_formatter(&|s| seconds(*s))
            .label_style(FONT.into_font())
            .max_light_lines(0)
            .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
            .draw()?;
        chart.draw_series(LineSeries::new(
            [(lo, lo), (hi, hi)],
            ShapeStyle::from(RGBColor(0x99, 0x99, 0x99)),
        ))?;
        chart.draw_series(order.iter().map(|s| {
            let colour = if s.saving_s > s.cost_s { INK } else { LOSS };
            Circle::new((s.cost_s.max(lo), s.saving_s.max(lo)), 5, colour.filled())
        }))?;
        for s in order.iter().take(labelled) {
            let (x, y) = chart.backend_coord(&(s.cost_s.max(lo), s.saving_s.max(lo)));
            root.draw(&Text::new(
                s.label.clone(),
                (x + 8, y - 6),
                FONT.into_font(),
            ))?;
        }
        Ok(())
    })
}
