//! The producer: owns the arena, publishes batches, serves consumers.
//!
//! Use: [`Producer::create`], then per epoch [`Producer::begin_epoch`],
//! [`Producer::loan`] a slot for each batch, write its arrays through the
//! returned [`SlotMut`], [`SlotMut::publish`] it, and [`Producer::end_epoch`].
//! [`Producer::finish`] (or drop) tells every consumer the stream is over.
//!
//! `loan` blocks only while every slot is leased, that is while the slowest
//! live consumer is a whole window behind, or (with [`IdlePolicy::Wait`])
//! while no consumer is attached.

mod control;
mod lock;
pub(crate) mod state;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::arena::layout_offset;
use crate::arena::Arena;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::layout::{Layout, LeafSpec, Node};
use crate::status::StatusReport;
use crate::wire::{self, ShutdownReason, ToConsumer};
use state::{ArenaInfo, Phase, State};

/// What the producer does while no consumer is attached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IdlePolicy {
    /// Wait for a consumer before publishing (optionally only this long,
    /// then fail with [`Error::NoConsumers`]).
    Wait(Option<Duration>),
    /// Publish anyway; batches nobody reads are overwritten.
    Run,
}

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// Slots retained: how far the slowest consumer may fall behind.
    pub window: usize,
    /// Bytes per slot; `None` sizes slots from the first batch with
    /// [`SLOT_HEADROOM`] headroom.
    pub slot_size: Option<usize>,
    /// Rows per epoch, when known: lets consumers know `len()` up front.
    pub samples_per_epoch: Option<u64>,
    /// The nominal batch size; `None`: the first batch's rows.
    pub batch_size: Option<u64>,
    /// What to do with no consumer attached.
    pub idle: IdlePolicy,
    /// Socket directory; `None`: the default (see [`crate::endpoint`]).
    pub dir: Option<PathBuf>,
}

/// Headroom of auto-sized slots over the first batch (25 %).
pub const SLOT_HEADROOM: f64 = 1.25;

impl Default for ProducerOptions {
    fn default() -> Self {
        ProducerOptions {
            window: 8,
            slot_size: None,
            samples_per_epoch: None,
            batch_size: None,
            idle: IdlePolicy::Wait(None),
            dir: None,
        }
    }
}

/// State shared with the control thread.
pub(crate) struct Shared {
    state: Mutex<State>,
    cond: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the bookkeeping half
        // updated in a way that matters more than stopping: keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases the lock and wakes the publisher if it waits (a release, a
    /// join or a departure may be what it waits for). Skipping the wake when
    /// nobody waits saves a syscall per release.
    fn notify(&self, state: MutexGuard<'_, State>) {
        let waiting = state.waiters > 0;
        drop(state);
        if waiting {
            self.cond.notify_all();
        }
    }

    /// Waits on the condition variable for at most `timeout`, counted as a
    /// waiter so that [`Shared::notify`] wakes it.
    fn wait<'a>(
        &self,
        mut state: MutexGuard<'a, State>,
        timeout: Duration,
    ) -> MutexGuard<'a, State> {
        state.waiters += 1;
        let mut state = self
            .cond
            .wait_timeout(state, timeout)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        state.waiters -= 1;
        state
    }
}

/// Figures about one finished epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochSummary {
    /// The epoch.
    pub epoch: u64,
    /// Batches published in it.
    pub batches: u64,
    /// Rows published in it.
    pub samples: u64,
}

/// A producer of batches under a name.
pub struct Producer {
    endpoint: Endpoint,
    opts: ProducerOptions,
    shared: Arc<Shared>,
    arena: Option<Arena>,
    control: Option<JoinHandle<()>>,
    wake: Option<OwnedFd>,
    lock: Option<lock::NameLock>,
    epoch_batches: u64,
    /// The first batch is described in the stream's spec.
    described: bool,
}

impl Producer {
    /// Claims `name` and starts listening for consumers.
    pub fn create(name: &str, opts: ProducerOptions) -> Result<Producer> {
        if opts.window == 0 {
            return Err(Error::InvalidArgument(
                "window must be at least 1 slot (2 or more lets consumers run apart)".into(),
            ));
        }
        if opts.batch_size == Some(0) {
            return Err(Error::InvalidArgument(
                "batch_size must be at least 1".into(),
            ));
        }
        let endpoint = Endpoint::resolve(name, opts.dir.as_deref())?;
        endpoint.ensure_dir()?;
        let lock = lock::NameLock::acquire(&endpoint)?;
        let sock_path = endpoint.socket_path();
        match std::fs::remove_file(&sock_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::io(
                    format!("cannot remove the stale socket {}", sock_path.display()),
                    e,
                ))
            }
        }
        let listener = UnixListener::bind(&sock_path)
            .map_err(|e| Error::io(format!("cannot listen on {}", sock_path.display()), e))?;
        set_mode(&sock_path, 0o600)?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("cannot configure the listening socket", e))?;
        let state = State::new(name, opts.window, opts.batch_size, opts.samples_per_epoch)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            cond: Condvar::new(),
        });
        let (wake_read, wake_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| Error::io("cannot create a pipe", e))?;
        let control = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("batchcast-{name}"))
                .spawn(move || control::run(shared, listener, wake_read))
                .map_err(|e| Error::io("cannot start the control thread", e))?
        };
        let mut producer = Producer {
            endpoint,
            opts,
            shared,
            arena: None,
            control: Some(control),
            wake: Some(wake_write),
            lock: Some(lock),
            epoch_batches: 0,
            described: false,
        };
        if let Some(size) = producer.opts.slot_size {
            producer.create_arena(size)?;
        }
        Ok(producer)
    }

    /// The producer's name.
    pub fn name(&self) -> &str {
        self.endpoint.name()
    }

    /// The socket consumers connect to.
    pub fn socket_path(&self) -> PathBuf {
        self.endpoint.socket_path()
    }

    /// Bytes per slot, once the arena exists.
    pub fn slot_size(&self) -> Option<usize> {
        self.arena.as_ref().map(|a| a.slot_size())
    }

    /// Consumers connected now.
    pub fn consumers(&self) -> usize {
        self.shared.lock().consumers.len()
    }

    /// Live figures.
    pub fn status(&self) -> StatusReport {
        self.shared.lock().report()
    }

    /// Sets the rows of the coming epochs (before `begin_epoch`).
    pub fn set_samples_per_epoch(&mut self, samples: Option<u64>) {
        self.opts.samples_per_epoch = samples;
        self.shared.lock().samples_per_epoch = samples;
    }

    /// Waits until at least `n` consumers are connected; false on timeout.
    pub fn wait_for_consumers(&self, n: usize, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut state = self.shared.lock();
        while state.consumers.len() < n {
            let step = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) => left,
                    None => return false,
                },
                None => Duration::from_secs(3600),
            };
            state = self.shared.wait(state, step);
        }
        true
    }

    /// Begins the next epoch; returns its number (the first is 0).
    pub fn begin_epoch(&mut self) -> Result<u64> {
        let mut state = self.shared.lock();
        if state.epoch.open {
            return Err(Error::Usage(
                "begin_epoch called twice without end_epoch".into(),
            ));
        }
        let number = state.epochs_begun;
        state.epochs_begun += 1;
        state.epoch = state::Epoch {
            number,
            open: true,
            first_seq: None,
            published_rows: 0,
            samples: state.samples_per_epoch,
        };
        for id in state.ids_in(Phase::Waiting) {
            if let Some(c) = state.consumers.get_mut(&id) {
                c.phase = Phase::Following;
                c.started = None;
                c.epoch_rows = 0;
            }
        }
        self.epoch_batches = 0;
        Ok(number)
    }

    /// Loans a free slot for a batch of the given structure. Blocks while
    /// every slot is leased (or no consumer is attached, under
    /// [`IdlePolicy::Wait`]); every 100 ms it calls `interrupt`, and stops
    /// with [`Error::Interrupted`] when that returns true.
    pub fn loan(
        &mut self,
        tree: Node,
        leaves: &[LeafSpec],
        interrupt: &mut dyn FnMut() -> bool,
    ) -> Result<SlotMut<'_>> {
        if !self.shared.lock().epoch.open {
            return Err(Error::Usage(
                "loan called outside an epoch; call begin_epoch first".into(),
            ));
        }
        let layout = Layout::plan(tree, leaves)?;
        if !self.described {
            self.describe_first(&layout);
        }
        // The slot holds the arrays, then the encoded layout.
        let needed = (layout_offset(layout.slot_bytes()) + encode_layout(&layout)?.len() as u64)
            .try_into()
            .unwrap_or(usize::MAX);
        if self.arena.is_none() {
            let size = ((needed as f64 * SLOT_HEADROOM) as usize)
                .max(needed)
                .next_multiple_of(4096);
            self.create_arena(size)?;
        }
        let slot_size = self.arena.as_ref().map(|a| a.slot_size()).unwrap_or(0);
        if needed > slot_size {
            return Err(Error::BatchTooLarge { needed, slot_size });
        }
        let index = self.wait_for_slot(interrupt)?;
        Ok(SlotMut {
            producer: self,
            index,
            layout,
        })
    }

    fn wait_for_slot(&mut self, interrupt: &mut dyn FnMut() -> bool) -> Result<usize> {
        let idle_since = Instant::now();
        let mut state = self.shared.lock();
        loop {
            let idle = state.consumers.is_empty();
            match self.opts.idle {
                IdlePolicy::Wait(limit) if idle => {
                    if let Some(limit) = limit {
                        if idle_since.elapsed() >= limit {
                            return Err(Error::NoConsumers {
                                secs: limit.as_secs_f64(),
                            });
                        }
                    }
                }
                _ => {
                    if let Some(i) = state.take_free_slot() {
                        state.board.set_producer_waiting(false);
                        return Ok(i);
                    }
                    // Say we wait, then look once more: a consumer that
                    // released after the first look, before it could see
                    // the flag, sent no wake-up.
                    state.board.set_producer_waiting(true);
                    if let Some(i) = state.take_free_slot() {
                        state.board.set_producer_waiting(false);
                        return Ok(i);
                    }
                }
            }
            let t0 = Instant::now();
            state = self.shared.wait(state, Duration::from_millis(100));
            if !idle {
                state.blocked += t0.elapsed();
            }
            // The hook may take other locks (Python's GIL): never call it
            // while holding the state lock.
            drop(state);
            if interrupt() {
                return Err(Error::Interrupted);
            }
            state = self.shared.lock();
        }
    }

    /// Describes the first batch planned in the stream's spec. Consumers
    /// welcomed from now on see it; with an auto-sized arena that is every
    /// consumer, since the first welcome waits for the first batch.
    fn describe_first(&mut self, layout: &Layout) {
        self.shared.lock().stream.first_batch = crate::stream::BatchShape::of(layout);
        self.described = true;
    }

    /// Sets the free-form metadata (a JSON text, at most
    /// [`crate::stream::MAX_METADATA`] bytes) announced to consumers that
    /// join from now on and shown by `batchcast status`.
    pub fn set_metadata(&mut self, json: String) -> Result<()> {
        crate::stream::check_metadata(&json)?;
        self.shared.lock().stream.metadata = json;
        Ok(())
    }

    fn create_arena(&mut self, slot_size: usize) -> Result<()> {
        let arena = Arena::create(self.endpoint.name(), self.opts.window, slot_size)?;
        let fd = arena.readonly_fd()?;
        self.arena = Some(arena);
        let mut state = self.shared.lock();
        state.arena = Some(ArenaInfo {
            fd,
            slot_size: slot_size as u64,
        });
        state.welcome_pending();
        self.shared.notify(state);
        Ok(())
    }

    fn publish(&mut self, index: usize, layout: Layout) -> Result<u64> {
        let rows = layout.rows();
        let used = layout.slot_bytes();
        let encoded = encode_layout(&layout)?;
        let mut state = self.shared.lock();
        let seq = state.next_seq;
        let epoch = state.epoch.number;
        if let Some(arena) = self.arena.as_mut() {
            arena.seal_slot(index, seq, epoch, used, &encoded)?;
        }
        state.next_seq += 1;
        if state.batch_size.is_none() {
            state.batch_size = Some(rows);
        }
        if state.epoch.first_seq.is_none() {
            state.epoch.first_seq = Some(seq);
        }
        let slot = &mut state.slots[index];
        slot.seq = Some(seq);
        slot.rows = rows;
        slot.holders.clear();
        let samples = state.epoch.samples;
        for id in state.ids_in(Phase::Following) {
            let started = state.consumers.get(&id).and_then(|c| c.started) == Some(epoch);
            if !started && !state.start_epoch_for(id, samples, false, seq) {
                continue;
            }
            state.subscribe(id, seq, rows);
        }
        // Only now may consumers see it: every holder is recorded.
        state.board.publish(seq, index);
        state.epoch.published_rows += rows;
        state.note_publish();
        self.epoch_batches += 1;
        Ok(seq)
    }

    /// Ends the current epoch: every consumer following it gets its end.
    pub fn end_epoch(&mut self) -> Result<EpochSummary> {
        let mut state = self.shared.lock();
        if !state.epoch.open {
            return Err(Error::Usage("end_epoch called outside an epoch".into()));
        }
        let epoch = state.epoch.number;
        let samples = state.epoch.samples;
        for id in state.ids_in(Phase::Following) {
            let started = state.consumers.get(&id).and_then(|c| c.started) == Some(epoch);
            let next = state.next_seq;
            if !started && !state.start_epoch_for(id, samples, false, next) {
                continue;
            }
            let rows = state.consumers.get(&id).map(|c| c.epoch_rows).unwrap_or(0);
            let end_seq = state.next_seq;
            if let Ok(frame) = wire::encode(&ToConsumer::EpochEnd {
                epoch,
                samples: rows,
                end_seq,
            }) {
                state.send_or_drop(id, &frame);
            }
            if let Some(c) = state.consumers.get_mut(&id) {
                c.started = None;
                c.phase = Phase::Waiting;
            }
        }
        state.epoch.open = false;
        Ok(EpochSummary {
            epoch,
            batches: self.epoch_batches,
            samples: state.epoch.published_rows,
        })
    }

    /// Tells every consumer the stream is over, with `reason`, and releases
    /// the name. Dropping the producer does this with `Finished`.
    pub fn finish(mut self, reason: ShutdownReason) {
        self.shutdown(reason);
    }

    fn shutdown(&mut self, reason: ShutdownReason) {
        if let Some(wake) = self.wake.take() {
            {
                let mut state = self.shared.lock();
                state.closed = true;
                if let Ok(frame) = wire::encode(&ToConsumer::Shutdown(reason)) {
                    state.broadcast(&frame);
                }
            }
            let _ = std::fs::remove_file(self.endpoint.socket_path());
            let _ = rustix::io::write(&wake, &[1]);
            if let Some(handle) = self.control.take() {
                let _ = handle.join();
            }
            let ids: Vec<u64> = self.shared.lock().consumers.keys().copied().collect();
            let mut state = self.shared.lock();
            for id in ids {
                state.remove_consumer(id);
            }
        }
        if let Some(lock) = self.lock.take() {
            lock.release();
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.shutdown(ShutdownReason::Finished);
    }
}

/// A loaned slot: write the batch's arrays, then [`SlotMut::publish`].
pub struct SlotMut<'p> {
    producer: &'p mut Producer,
    index: usize,
    layout: Layout,
}

impl SlotMut<'_> {
    /// Where each array goes.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The bytes of leaf `i`, to fill.
    pub fn leaf_mut(&mut self, i: usize) -> &mut [u8] {
        let leaf = &self.layout.leaves[i];
        let (start, len) = (leaf.offset as usize, leaf.nbytes as usize);
        let arena = self
            .producer
            .arena
            .as_mut()
            .expect("a loaned slot implies an arena");
        &mut arena.slot_mut(self.index)[start..start + len]
    }

    /// Every leaf's bytes at once, to fill in parallel.
    pub fn leaves_mut(&mut self) -> Vec<&mut [u8]> {
        let arena = self
            .producer
            .arena
            .as_mut()
            .expect("a loaned slot implies an arena");
        let mut rest = arena.slot_mut(self.index);
        let mut consumed = 0usize;
        let mut out = Vec::with_capacity(self.layout.leaves.len());
        for leaf in &self.layout.leaves {
            let start = leaf.offset as usize - consumed;
            let (_, tail) = rest.split_at_mut(start);
            let (mine, tail) = tail.split_at_mut(leaf.nbytes as usize);
            out.push(mine);
            rest = tail;
            consumed = leaf.offset as usize + leaf.nbytes as usize;
        }
        out
    }

    /// Keeps only the first `rows` rows (a source skipped bad samples):
    /// re-plans the layout for `rows` and moves each array's first rows to
    /// its new place. Fails if `rows` is 0 or more than the batch has.
    pub fn truncate_rows(&mut self, rows: u64) -> Result<()> {
        let old = self.layout.rows();
        if rows == old {
            return Ok(());
        }
        if rows == 0 || rows > old {
            return Err(Error::InvalidBatch(format!(
                "cannot keep {rows} rows of a batch of {old}"
            )));
        }
        let specs: Vec<LeafSpec> = self
            .layout
            .leaves
            .iter()
            .map(|l| {
                if l.kind == crate::layout::LeafKind::StrList {
                    return Err(Error::InvalidBatch(
                        "a batch with strings cannot be truncated".into(),
                    ));
                }
                let mut shape = l.shape.clone();
                shape[0] = rows;
                Ok(LeafSpec {
                    kind: l.kind,
                    dtype: l.dtype,
                    shape,
                    text_bytes: 0,
                })
            })
            .collect::<Result<_>>()?;
        let new = Layout::plan(self.layout.tree.clone(), &specs)?;
        let arena = self
            .producer
            .arena
            .as_mut()
            .expect("a loaned slot implies an arena");
        let slot = arena.slot_mut(self.index);
        // New offsets are never past old ones (every leaf shrank), so moving
        // leaves front to back never overwrites one not yet moved.
        for (o, n) in self.layout.leaves.iter().zip(&new.leaves) {
            let len = n.nbytes as usize;
            slot.copy_within(
                o.offset as usize..o.offset as usize + len,
                n.offset as usize,
            );
        }
        self.layout = new;
        Ok(())
    }

    /// Publishes the batch to every consumer following the epoch; returns
    /// its sequence number.
    pub fn publish(self) -> Result<u64> {
        let SlotMut {
            producer,
            index,
            layout,
        } = self;
        producer.publish(index, layout)
    }
}

/// The layout as it is stored in the slot after the arrays.
fn encode_layout(layout: &Layout) -> Result<Vec<u8>> {
    let bytes = postcard::to_stdvec(layout)
        .map_err(|e| Error::Protocol(format!("cannot encode a batch layout: {e}")))?;
    if bytes.len() > wire::MAX_FRAME {
        return Err(Error::InvalidBatch(format!(
            "the batch's description takes {} bytes (at most {} allowed): too many arrays or \
             strings in one batch",
            bytes.len(),
            wire::MAX_FRAME
        )));
    }
    Ok(bytes)
}

fn set_mode(path: &std::path::Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("cannot chmod {}", path.display()), e))
}
