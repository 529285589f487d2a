//! Progress bars on a terminal; silence in a pipe.

use indicatif::{ProgressBar, ProgressStyle};

/// One bar per epoch, when enabled.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar when `enabled` (stderr is a terminal), else nothing.
    pub fn new(enabled: bool) -> Self {
        Progress {
            bar: enabled.then(|| {
                let bar = ProgressBar::new(0);
                bar.set_style(
                    ProgressStyle::with_template(
                        "epoch {prefix} [{bar:30}] {pos}/{len} batches {per_sec} {msg} eta {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar
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
