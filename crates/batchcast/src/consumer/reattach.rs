//! A consumer that lost a producer which resumes its stream (its welcome
//! said so: it keeps a state file) waits for a producer restarted under
//! the same name, up to `ConsumerOptions::reconnect_timeout`, and
//! reattaches: the same uid check and the full validation of the new
//! regions as at connection. It joins at the resumed epoch's start, and
//! skips the rows it already has (`Consumer::read_batch`), so that what it
//! hands out is what an uninterrupted run hands out. Batches and pieces of
//! batches it holds from the dead producer's arena stay valid: their
//! leases keep the old mapping until they drop.
//!
//! A reattachment is recorded as an event of the consumer's run when
//! `batchcast run` started it (`crate::run_events`).
//!
//! The wait is one warning line, then attempts to attach, each woken by a
//! change in the socket directory (inotify) or a tick; a producer that
//! refused to resume the stream (another dataset or seed, a damaged state
//! file) leaves its reason for the waiting consumers, which fail with it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::attach::{attach, Attach};
use super::{Consumer, TICK};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::wire::JoinPolicy;

impl Consumer {
    /// True when a lost producer may be waited for.
    pub(super) fn can_reattach(&self) -> bool {
        self.welcome.resumable && !self.opts.reconnect_timeout.is_zero()
    }

    /// The producer is lost: says once that this consumer waits for it.
    pub(super) fn warn_waiting(&self) {
        let name = &self.name;
        self.opts.warn.emit(&format!(
            "producer {name:?} is gone; waiting up to {:.0} s for it to be restarted under the \
             same name (`batchcast serve --name {name} ...`, same dataset, seed and options), \
             then continuing where this consumer stopped",
            self.opts.reconnect_timeout.as_secs_f64()
        ));
    }

    /// Records the reattachment as an event of this process's run, when
    /// `batchcast run` started it (`crate::run_events`): how long it
    /// waited, and where it stands.
    fn record_reattached(&mut self, waited_secs: f64) {
        let at = |v: Option<u64>| v.map_or("null".to_owned(), |n| n.to_string());
        let line = format!(
            "{{\"event\":\"reattached\",\"epoch\":{},\"row\":{},\"waited_secs\":{waited_secs:.3}}}",
            at(self.pos.map(|p| p.epoch)),
            at(self.pos.map(|p| p.row)),
        );
        let warn = self.opts.warn.clone();
        self.run_events
            .get_or_insert_with(|| crate::RunEvents::from_env(warn))
            .record(&line);
    }

    /// Waits for a restarted producer and reattaches to it; after the
    /// reconnect timeout, fails with [`Error::ProducerGone`] (and so does
    /// every later call).
    pub(super) fn reattach(&mut self, interrupt: &mut dyn FnMut() -> bool) -> Result<()> {
        let since = *self.lost.get_or_insert_with(Instant::now);
        let timeout = self.opts.reconnect_timeout;
        let name = self.name.clone();
        let endpoint = Endpoint::resolve(&name, self.opts.dir.as_deref())?;
        loop {
            if let Some(reason) = crate::producer::read_refusal(&endpoint) {
                self.gone = true;
                return Err(Error::JoinRefused { name, reason });
            }
            let left = (since + timeout).saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.gone = true;
                self.events.clear();
                return Err(self.gone_error());
            }
            let how = Attach {
                join: JoinPolicy::CatchUp,
                timeout: Some(left.min(TICK)),
                clear: false,
                deferred: false,
            };
            let attempt = attach(&endpoint, &self.opts, how, interrupt);
            match attempt {
                Ok(a) => {
                    let link = Arc::new(a.link);
                    for (new, old) in [
                        (&link.delivered, &self.link.delivered),
                        (&link.waited_ns, &self.link.waited_ns),
                    ] {
                        new.store(old.load(Ordering::Relaxed), Ordering::Relaxed);
                    }
                    self.link = link;
                    self.reader = a.reader;
                    self.arena = Arc::new(a.arena);
                    self.welcome = a.welcome;
                    self.watch = a.watch;
                    self.mirrors = a.mirrors;
                    self.mirror_generation += 1;
                    self.control.clear();
                    self.cursor = None;
                    self.cut_off = false;
                    self.lost = None;
                    self.reattached = true;
                    self.parked = false;
                    self.awaiting_start = false;
                    self.record_reattached(since.elapsed().as_secs_f64());
                    return Ok(());
                }
                // Not there yet, or a restart that died while welcoming.
                Err(Error::ProducerNotFound { .. } | Error::ProducerGone { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
