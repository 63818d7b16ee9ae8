//! Stacked bar charts as inline SVG, drawn on the server: the admin page
//! runs no script (its CSP is `default-src 'none'`). The SVG scales to its
//! box (`viewBox` and `width:100%`); two sizes are drawn, one for wide
//! screens and one whose text stays readable on a 390 px phone, and the
//! page's CSS shows one of them. Every bar carries its figures in
//! `data-series` / `data-count` and in a `<title>` tooltip; maud escapes
//! every text, so an outcome's name cannot become markup.

use maud::{Markup, html};

/// One stacked layer: a name, its colour, and one value per bar.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub values: Vec<i64>,
}

/// The chart: per bar a tooltip label (`10:30–11:00`) and an axis label
/// (`10:30`), and the layers from the bottom up.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub tooltips: Vec<String>,
    pub axis_labels: Vec<String>,
    pub series: Vec<Series>,
}

/// The drawing's size, in the SVG's own units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// 960 × 280, about 6 axis labels: 1280 px screens.
    Wide,
    /// 360 × 240, about 3 axis labels: phones.
    Narrow,
}

impl Size {
    fn width(self) -> f64 {
        match self {
            Size::Wide => 960.0,
            Size::Narrow => 360.0,
        }
    }

    fn height(self) -> f64 {
        match self {
            Size::Wide => 280.0,
            Size::Narrow => 240.0,
        }
    }

    fn axis_labels(self) -> usize {
        match self {
            Size::Wide => 6,
            Size::Narrow => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Size::Wide => "wide",
            Size::Narrow => "narrow",
        }
    }
}

const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 26.0;
const FONT: f64 = 12.0;

/// A round step (1, 2 or 5 × 10ⁿ) that divides 0..=`max` into at most four
/// parts, and the axis's top: the first multiple of the step at or above
/// `max` (at least one step).
pub fn axis(max: i64) -> (i64, i64) {
    let mut step = 1i64;
    'search: for magnitude in 0..18 {
        let power = 10i64.pow(magnitude);
        for factor in [1, 2, 5] {
            step = factor * power;
            if step.saturating_mul(4) >= max {
                break 'search;
            }
        }
    }
    let top = ((max.max(1) + step - 1) / step) * step;
    (step, top)
}

fn number(value: f64) -> String {
    format!("{value:.1}")
}

/// The chart as an `<svg>` of `size`.
pub fn stacked_bars(chart: &Chart, size: Size) -> Markup {
    let bars = chart.tooltips.len();
    let totals: Vec<i64> = (0..bars)
        .map(|i| chart.series.iter().map(|s| value(s, i)).sum())
        .collect();
    let (step, top) = axis(totals.iter().copied().max().unwrap_or(0));
    let (width, height) = (size.width(), size.height());
    let plot_width = width - LEFT - RIGHT;
    let plot_height = height - TOP - BOTTOM;
    let pitch = plot_width / bars.max(1) as f64;
    let bar_width = (pitch * 0.8).max(1.0);
    let y = |v: i64| TOP + plot_height - plot_height * v as f64 / top as f64;
    let every = bars.div_ceil(size.axis_labels()).max(1);
    let grand_total: i64 = totals.iter().sum();
    html! {
        svg.chart xmlns="http://www.w3.org/2000/svg" role="img"
            viewBox={ "0 0 " (width) " " (height) }
            preserveAspectRatio="xMidYMid meet"
            data-size=(size.name()) data-total=(grand_total)
            style="width:100%;height:auto;display:block" {
            title { (chart.title) }
            // The y axis: gridlines and counts at each step.
            @for tick in (0..=top).step_by(usize::try_from(step).unwrap_or(1)) {
                line.grid x1=(LEFT) x2=(width - RIGHT) y1=(number(y(tick))) y2=(number(y(tick)))
                    stroke=(if tick == 0 { "#4a5263" } else { "#e3e6eb" }) stroke-width="1" {}
                text x=(LEFT - 6.0) y=(number(y(tick) + FONT / 3.0)) text-anchor="end"
                    font-size=(FONT) fill="#4a5263" { (tick) }
            }
            @for i in 0..bars {
                @let x = LEFT + pitch * i as f64 + (pitch - bar_width) / 2.0;
                @for (series, below, count) in stack(&chart.series, i) {
                    rect.bar x=(number(x)) width=(number(bar_width))
                        y=(number(y(below + count))) height=(number(y(below) - y(below + count)))
                        fill=(series.color) data-series=(series.name) data-count=(count) data-bar=(i) {
                        title { (chart.tooltips[i]) " · " (series.name) ": " (count) }
                    }
                }
                @if i % every == 0 {
                    text x=(number(LEFT + pitch * i as f64)) y=(number(height - 8.0))
                        font-size=(FONT) fill="#4a5263" { (chart.axis_labels[i]) }
                }
            }
        }
    }
}

/// Bar `bar`'s non-zero layers, each with the count stacked below it.
fn stack(series: &[Series], bar: usize) -> Vec<(&Series, i64, i64)> {
    let mut below = 0;
    let mut layers = Vec::new();
    for layer in series {
        let count = value(layer, bar);
        if count > 0 {
            layers.push((layer, below, count));
            below += count;
        }
    }
    layers
}

fn value(series: &Series, bar: usize) -> i64 {
    series.values.get(bar).copied().unwrap_or(0)
}

/// The legend: each layer's colour, name and total, as HTML so that it
/// wraps on a narrow screen.
pub fn legend(chart: &Chart) -> Markup {
    html! {
        ul.legend {
            @for series in &chart.series {
                li data-series=(series.name) {
                    span.swatch style={ "background:" (series.color) } {}
                    (series.name) " "
                    strong { (series.values.iter().sum::<i64>()) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "Deliveries".into(),
            tooltips: vec![
                "10:00–10:30".into(),
                "10:30–11:00".into(),
                "11:00–11:30".into(),
            ],
            axis_labels: vec!["10:00".into(), "10:30".into(), "11:00".into()],
            series: vec![
                Series {
                    name: "processed".into(),
                    color: "#2e8540",
                    values: vec![3, 0, 1],
                },
                Series {
                    name: "rejected:<b>x</b>".into(),
                    color: "#c0392b",
                    values: vec![1, 0, 0],
                },
            ],
        }
    }

    #[test]
    fn the_axis_takes_round_steps_of_at_most_four_parts() {
        assert_eq!(axis(0), (1, 1));
        assert_eq!(axis(1), (1, 1));
        assert_eq!(axis(4), (1, 4));
        assert_eq!(axis(5), (2, 6));
        assert_eq!(axis(7), (2, 8));
        assert_eq!(axis(100), (50, 100));
        assert_eq!(axis(101), (50, 150));
        assert_eq!(axis(12_345), (5_000, 15_000));
    }

    #[test]
    fn each_non_zero_count_is_a_bar_with_its_figures_and_a_tooltip() {
        let svg = stacked_bars(&chart(), Size::Wide).into_string();
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        assert!(
            svg.contains(r#"data-series="processed" data-count="3" data-bar="0""#),
            "{svg}"
        );
        assert!(svg.contains(r#"data-count="1" data-bar="2""#), "{svg}");
        assert!(
            svg.contains("<title>10:00–10:30 · processed: 3</title>"),
            "{svg}"
        );
        assert!(svg.contains(r#"data-total="5""#));
        assert!(svg.contains(r#"viewBox="0 0 960 280""#));
        assert!(svg.contains("width:100%"));
    }

    #[test]
    fn stacked_bars_sit_on_each_other_and_the_tallest_reaches_the_axis_top() {
        let svg = stacked_bars(&chart(), Size::Narrow).into_string();
        // Axis top 4 (step 1); plot from y=12 to y=214.
        assert!(
            svg.contains(r#"y="62.5" height="151.5""#),
            "processed 0..3: {svg}"
        );
        assert!(
            svg.contains(r#"y="12.0" height="50.5""#),
            "rejected 3..4: {svg}"
        );
        for tick in 0..=4 {
            assert!(
                svg.contains(&format!(">{tick}</text>")),
                "tick {tick}: {svg}"
            );
        }
    }

    #[test]
    fn names_are_escaped_text() {
        let chart = chart();
        let svg = stacked_bars(&chart, Size::Wide).into_string();
        let legend = legend(&chart).into_string();
        for markup in [&svg, &legend] {
            assert!(!markup.contains("<b>"), "{markup}");
            assert!(markup.contains("rejected:&lt;b&gt;x&lt;/b&gt;"), "{markup}");
        }
        assert!(legend.contains("<strong>4</strong>"), "{legend}");
    }
}
