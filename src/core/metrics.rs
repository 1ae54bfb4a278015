//! Figures as Prometheus text: the page a scrape reads (`Exposition`) and
//! the latency histograms' buckets. Modules write their families through
//! their `metrics` hook.

use std::fmt::{Display, Write};

/// Upper bounds (ms) of the request-duration buckets; one more bucket is +Inf.
pub const DURATION_BUCKETS_MS: [u64; 11] = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

/// A histogram read out: per-bucket counts (not cumulative) and the sum in µs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub buckets: [u64; DURATION_BUCKETS_MS.len() + 1],
    pub sum_us: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// A Prometheus text-format page being written.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Start a family: its HELP and TYPE lines (`kind`: counter, gauge, histogram).
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample line.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    /// A histogram with [`DURATION_BUCKETS_MS`] bounds, in seconds: cumulative
    /// `_bucket` lines, `_sum` and `_count`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        let mut cumulative = 0;
        for (i, n) in h.buckets.iter().enumerate() {
            cumulative += n;
            let le = match DURATION_BUCKETS_MS.get(i) {
                Some(ms) => seconds(ms * 1000),
                None => "+Inf".to_string(),
            };
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {cumulative}");
        }
        let _ = write!(self.out, "{name}_sum");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", seconds(h.sum_us));
        let _ = write!(self.out, "{name}_count");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {cumulative}");
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let mut first = true;
        for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
            if !first {
                self.out.push(',');
            }
            first = false;
            let _ = write!(self.out, "{k}=\"");
            for c in v.chars() {
                match c {
                    '\\' => self.out.push_str("\\\\"),
                    '"' => self.out.push_str("\\\""),
                    '\n' => self.out.push_str("\\n"),
                    c => self.out.push(c),
                }
            }
            self.out.push('"');
        }
        self.out.push('}');
    }

    pub fn into_string(self) -> String {
        self.out
    }
}

/// Microseconds as seconds, without trailing zeros (`250_000` → `0.25`).
fn seconds(us: u64) -> String {
    if us.is_multiple_of(1_000_000) {
        return (us / 1_000_000).to_string();
    }
    let s = format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
    s.trim_end_matches('0').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_format() {
        let mut e = Exposition::default();
        e.family("x_total", "counter", "An x.");
        e.sample("x_total", &[("a", "q\"\\\n")], 3);
        e.sample("y", &[], 1);
        let mut h = HistogramSnapshot::default();
        h.buckets[0] = 2;
        h.buckets[11] = 1;
        h.sum_us = 12_345_678;
        e.histogram("d", &[("w", "0")], &h);
        let t = e.into_string();
        assert!(t.starts_with("# HELP x_total An x.\n# TYPE x_total counter\n"));
        assert!(t.contains("x_total{a=\"q\\\"\\\\\\n\"} 3\n"), "{t}");
        assert!(t.contains("\ny 1\n"));
        assert!(t.contains("d_bucket{w=\"0\",le=\"0.005\"} 2\n"), "{t}");
        assert!(t.contains("d_bucket{w=\"0\",le=\"0.25\"} 2\n"), "{t}");
        assert!(t.contains("d_bucket{w=\"0\",le=\"10\"} 2\n"), "{t}");
        assert!(t.contains("d_bucket{w=\"0\",le=\"+Inf\"} 3\n"), "{t}");
        assert!(t.contains("d_sum{w=\"0\"} 12.345678\n"), "{t}");
        assert!(t.contains("d_count{w=\"0\"} 3\n"), "{t}");
    }

    #[test]
    fn seconds_text() {
        assert_eq!(seconds(5_000), "0.005");
        assert_eq!(seconds(250_000), "0.25");
        assert_eq!(seconds(1_000_000), "1");
        assert_eq!(seconds(2_500_000), "2.5");
        assert_eq!(seconds(312), "0.000312");
    }
}
