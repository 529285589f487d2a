//! Progress bars on a terminal; silence in a pipe.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps drawn with `template` (indicatif's syntax) in the
/// command's one style; a template indicatif refuses falls back to its
/// default bar.
pub fn bar(len: u64, template: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

/// One bar per epoch, when enabled.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar when `enabled` (stderr is a terminal), else nothing.
    pub fn new(enabled: bool) -> Self {
        Progress {
            bar: enabled.then(|| {
                bar(
                    0,
                    "epoch {prefix} [{bar:30}] {pos}/{len} batches {per_sec} {msg} eta {eta}",
                )
            }),
        }
    }

    /// Batch `i` of `n` of `epoch` is out.
    pub fn batch(&self, epoch: u64, i: u64, n: u64, batch_size: u64) {
        if let Some(bar) = &self.bar {
            if i == 1 {
                bar.reset();
                bar.set_length(n);
                bar.set_prefix(epoch.to_string());
            }
            bar.set_position(i);
            let rate = bar.per_sec() * batch_size as f64;
            bar.set_message(format!("({rate:.0} samples/s)"));
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
