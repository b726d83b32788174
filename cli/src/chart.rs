//! SVG charts of benchmark records: one chart per family and dtype, one line per variant and a
//! thick one per baseline (cuBLAS per layout, or the copy), across the benchmarked shapes.

use plotters::prelude::*;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use tilesmith_trials::report::Record;

/// Draws `records` (one family and dtype) into an SVG at `path`.
pub fn draw(path: &Path, title: &str, records: &[Record]) -> Result<(), String> {
    // Shapes, lines and points found through maps: a chart of 20,000 records is linear work.
    let mut shapes: Vec<String> = Vec::new();
    let mut shape_at: HashMap<String, usize> = HashMap::new();
    let mut series = Lines::default();
    let mut baselines = Lines::default();
    let mut baseline_points: HashSet<(String, usize)> = HashSet::new();
    for r in records {
        let label = shape_label(r);
        let x = *shape_at.entry(label.clone()).or_insert_with(|| {
            shapes.push(label);
            shapes.len() - 1
        });
        series.add(&r.variant, (x, r.kernel));
        let baseline = if r.group.is_empty() { r.baseline_name.clone() } else { format!("{} {}", r.baseline_name, r.group) };
        if baseline_points.insert((baseline.clone(), x)) {
            baselines.add(&baseline, (x, r.baseline));
        }
    }
    let (series, baselines) = (series.lines, baselines.lines);
    let top = records.iter().flat_map(|r| [r.kernel, r.baseline]).fold(0.0, f64::max) * 1.1;
    let unit = records.first().map_or("", |r| r.unit.as_str());

    let height = 480 + 18 * ((series.len() + baselines.len()) as u32);
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..(shapes.len() as f64 - 0.5), 0.0..top.max(1.0))
        .map_err(|e| err(&e))?;
    let labels = shapes.clone();
    chart
        .configure_mesh()
        .x_labels(shapes.len())
        .x_label_formatter(&move |x| labels.get(x.round() as usize).filter(|_| (x - x.round()).abs() < 1e-6).cloned().unwrap_or_default())
        .y_desc(unit)
        .x_desc("shape")
        .draw()
        .map_err(|e| err(&e))?;
    let as_f = |points: &[(usize, f64)]| points.iter().map(|(x, y)| (*x as f64, *y)).collect::<Vec<_>>();
    for (index, (name, points)) in baselines.iter().enumerate() {
        let shade = RGBColor(0, 0, 0).mix(1.0 - 0.15 * index as f64);
        chart
            .draw_series(LineSeries::new(as_f(points), shade.stroke_width(4)))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], shade.stroke_width(4)));
    }
    for (index, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        let points = as_f(points);
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled()))).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Named lines of points, in the order their names first come.
#[derive(Default)]
struct Lines {
    lines: Vec<(String, Vec<(usize, f64)>)>,
    index: HashMap<String, usize>,
}

impl Lines {
    fn add(&mut self, name: &str, point: (usize, f64)) {
        let at = *self.index.entry(name.to_string()).or_insert_with(|| {
            self.lines.push((name.to_string(), Vec::new()));
            self.lines.len() - 1
        });
        self.lines[at].1.push(point);
    }
}

fn shape_label(record: &Record) -> String {
    record.shape.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}
