//! How a metric is laid out on a chart, whoever draws it (`batchcast runs
//! plot`'s SVG/PNG, the dashboard's canvas): what the x axis counts, and
//! the y axis label that a metric's name gives (see [`crate::keys`] for
//! the unit suffixes).

/// What the x axis shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    /// Seconds since each run started.
    Elapsed,
    /// The logged step.
    Step,
}

/// The y axis label: the metric's name with the unit its suffix gives.
pub fn unit_label(key: &str) -> String {
    let unit = [
        ("_bytes_per_s", "bytes/s"),
        ("_per_s", "per second"),
        ("_bytes", "bytes"),
        ("_percent", "%"),
        ("_seconds", "s"),
        ("_share", "fraction of time"),
        ("_w", "W"),
        ("_mhz", "MHz"),
    ]
    .iter()
    .find(|(suffix, _)| key.ends_with(suffix))
    .map(|(_, u)| *u);
    match unit {
        Some(u) => format!("{key} ({u})"),
        None => key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::unit_label;

    #[test]
    fn a_unit_suffix_names_the_unit() {
        for (key, want) in [
            ("proc/rss_bytes", "proc/rss_bytes (bytes)"),
            ("proc/read_bytes_per_s", "proc/read_bytes_per_s (bytes/s)"),
            ("loss", "loss"),
        ] {
            assert_eq!(unit_label(key), want, "{key}");
        }
    }
}
