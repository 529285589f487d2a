//! The producer: owns the arena, publishes batches, serves consumers.
//!
//! Use: [`Producer::create`], then per epoch [`Producer::begin_epoch`],
//! [`Producer::loan`] a slot for each batch, write its arrays through the
//! returned [`SlotMut`], [`SlotMut::publish`] it, and [`Producer::end_epoch`].
//! [`Producer::finish`] (or drop) tells every consumer the stream is over.
//!
//! `loan` blocks while the most advanced consumer has a whole window
//! published that it has not begun to read (the producer paces itself to
//! its fastest consumer, never further ahead), while every slot is leased,
//! that is while the slowest live consumer is a whole window plus the lag
//! budget behind (see [`LagBudget`]; past it, [`LagPolicy`] says whether
//! to wait or to evict the laggard), or (with [`IdlePolicy::Wait`]) while
//! no consumer is attached.

mod admission;
mod control;
mod durable;
mod lag;
pub(crate) mod lock;
mod mirrors;
mod options;
mod payload;
mod slot;
mod slots;
mod state;

pub(crate) use durable::read_refusal;
pub use durable::{differences as identity_differences, Durability, ResumePoint, MAX_IDENTITY};
pub use lag::{LagBudget, LagPolicy, DEFAULT_LAG_BYTES};
pub use options::{IdlePolicy, ProducerOptions, SLOT_HEADROOM};
pub use payload::MAX_PAYLOAD;
pub use slot::SlotMut;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::arena::{available_memory, layout_offset, Arena};
use crate::board::MAX_SLOTS;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::layout::{Layout, LeafSpec, Node};
use crate::mirror::{check_mirrors, Mirror};
use crate::status::StatusReport;
use crate::wire::{self, ShutdownReason, ToConsumer};
use durable::StateFile;
use mirrors::{allocate_mirrors, copy_to_mirrors};
use payload::Payloads;
use slot::encode_layout;
use state::State;

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
        let waiting = state.has_waiters();
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
        state.set_waiting(true);
        let mut state = self
            .cond
            .wait_timeout(state, timeout)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        state.set_waiting(false);
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
    /// The kernel refused memory for a lag slot (warned once).
    lag_refused: bool,
    /// The first batch is described in the stream's spec.
    described: bool,
    /// The state file, for a durable producer.
    state_file: Option<StateFile>,
    /// Where this producer resumed its stream, if it did.
    resumed: Option<ResumePoint>,
    /// Batches this producer published.
    published: u64,
    /// The resume point written is never past this one until as many
    /// consumers as it had are attached again (those not back yet have
    /// received nothing of this producer).
    floor: Option<ResumePoint>,
    /// The caller's resume payloads (see [`Producer::set_resume_payload`]).
    payloads: Payloads,
    /// The payload read back with the resume point.
    resumed_payload: Option<String>,
    /// The devices each slot is copied to before it is published.
    mirrors: Vec<Mirror>,
}

impl Producer {
    /// Claims `name` and starts listening for consumers.
    pub fn create(name: &str, opts: ProducerOptions) -> Result<Producer> {
        check_options(&opts)?;
        let endpoint = Endpoint::resolve(name, opts.dir.as_deref())?;
        endpoint.ensure_dir()?;
        let lock = lock::NameLock::acquire(&endpoint)?;
        durable::clear_refusal(&endpoint);
        let (state_file, found) = match &opts.durable {
            Some(d) => {
                let (file, found) = StateFile::open(&endpoint, d)?;
                (Some(file), found)
            }
            None => (None, None),
        };
        let resumed = found.as_ref().map(|s| s.point);
        // A restart makes its arena at once, as large as its predecessor's,
        // so that reattaching consumers are welcomed before its first batch.
        let mut opts = opts;
        let mirrors = std::mem::take(&mut opts.mirrors);
        opts.slot_size = opts
            .slot_size
            .or(found.as_ref().and_then(|s| s.slot_size()));
        let (payloads, resumed_payload) = Payloads::resumed(found);
        let listener = listen(&endpoint)?;
        if opts.window > MAX_SLOTS {
            return Err(Error::InvalidArgument(format!(
                "window must be at most {MAX_SLOTS} slots, not {}",
                opts.window
            )));
        }
        let state = initial_state(name, &opts, state_file.is_some(), resumed);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            cond: Condvar::new(),
        });
        let (control, wake) = start_control(name, &shared, listener)?;
        let mut producer = Producer {
            endpoint,
            opts,
            shared,
            arena: None,
            control: Some(control),
            wake: Some(wake),
            lock: Some(lock),
            epoch_batches: 0,
            lag_refused: false,
            described: false,
            state_file,
            resumed,
            published: 0,
            floor: resumed,
            payloads,
            resumed_payload,
            mirrors,
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
        self.shared.lock().consumer_count()
    }

    /// Live figures.
    pub fn status(&self) -> StatusReport {
        self.shared.lock().report()
    }

    /// Sets the rows of the coming epochs (before `begin_epoch`).
    pub fn set_samples_per_epoch(&mut self, samples: Option<u64>) {
        self.opts.samples_per_epoch = samples;
        self.shared.lock().set_samples_per_epoch(samples);
    }

    /// Announces an epoch boundary to every consumer: the size of the
    /// epochs to come (`next_samples`, also the welcome's from now on) and
    /// the trigger that fired, which each consumer hands out after the
    /// ending epoch's last batch, before its end.
    /// Call it after an epoch's last batch (before `end_epoch`) or between
    /// epochs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a trigger id longer than
    /// [`MAX_TRIGGER_ID`](crate::MAX_TRIGGER_ID) bytes.
    pub fn announce_boundary(&mut self, boundary: &crate::Boundary) -> Result<()> {
        if let Some(t) = &boundary.trigger {
            if t.id.len() > crate::MAX_TRIGGER_ID {
                return Err(Error::InvalidArgument(format!(
                    "a trigger id of {} bytes is longer than the {}-byte limit; name it shorter",
                    t.id.len(),
                    crate::MAX_TRIGGER_ID
                )));
            }
        }
        if let Some(n) = boundary.next_samples {
            self.opts.samples_per_epoch = Some(n);
        }
        self.shared.lock().announce_boundary(boundary)
    }

    /// Waits until at least `n` consumers are connected; false on timeout.
    pub fn wait_for_consumers(&self, n: usize, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut state = self.shared.lock();
        while state.consumer_count() < n {
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

    /// Begins the next epoch; returns its number (the first is 0, or a
    /// resumed stream's epoch, see [`Producer::resumed`]).
    pub fn begin_epoch(&mut self) -> Result<u64> {
        let number = self.shared.lock().begin_epoch()?;
        self.epoch_batches = 0;
        self.save_state(true)?;
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
        if !self.shared.lock().epoch_open() {
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
        Ok(SlotMut::new(self, index, layout))
    }

    fn wait_for_slot(&mut self, interrupt: &mut dyn FnMut() -> bool) -> Result<usize> {
        let idle_since = Instant::now();
        let mut blocked_since: Option<Instant> = None;
        let Producer {
            endpoint,
            opts,
            shared,
            arena,
            lag_refused,
            ..
        } = self;
        let Some(arena) = arena.as_ref() else {
            return Err(Error::Usage("no arena to loan a slot from".into()));
        };
        let name = endpoint.name();
        let mut reserve = |i: usize| reserve_lag_slot(arena, i, lag_refused, opts, name);
        let mut state = shared.lock();
        loop {
            let idle = state.consumer_count() == 0;
            match opts.idle {
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
                    if let Some(i) = state.take_slot(&mut reserve) {
                        return Ok(i);
                    }
                    // Every slot is held, lag slots included.
                    let since = *blocked_since.get_or_insert_with(Instant::now);
                    if let LagPolicy::Evict { stall_timeout } = opts.lag_policy {
                        if since.elapsed() >= stall_timeout && state.evict_laggards() > 0 {
                            continue; // their slots may be free now
                        }
                    }
                }
            }
            let t0 = Instant::now();
            state = shared.wait(state, Duration::from_millis(100));
            if !idle {
                state.note_blocked(t0.elapsed());
            }
            // The hook may take other locks (Python's GIL): never call it
            // while holding the state lock.
            drop(state);
            if interrupt() {
                return Err(Error::Interrupted);
            }
            state = shared.lock();
        }
    }

    /// Describes the first batch planned in the stream's spec. Consumers
    /// welcomed from now on see it; with an auto-sized arena that is every
    /// consumer, since the first welcome waits for the first batch.
    fn describe_first(&mut self, layout: &Layout) {
        self.shared
            .lock()
            .set_first_batch(crate::stream::BatchShape::of(layout));
        self.described = true;
    }

    /// Sets the free-form metadata (a JSON text, at most
    /// [`crate::stream::MAX_METADATA`] bytes) announced to consumers that
    /// join from now on and shown by `batchcast status`.
    pub fn set_metadata(&mut self, json: String) -> Result<()> {
        crate::stream::check_metadata(&json)?;
        self.shared.lock().set_metadata(json);
        Ok(())
    }

    fn create_arena(&mut self, slot_size: usize) -> Result<()> {
        let window = self.opts.window;
        let page = rustix::param::page_size();
        let rounded = slot_size
            .checked_next_multiple_of(page)
            .unwrap_or(slot_size);
        let lag = LagBudget::slots(self.opts.max_lag, rounded, available_memory())
            .min(MAX_SLOTS - window);
        let arena = Arena::create_lazy(self.endpoint.name(), window + lag, window, slot_size)?;
        let fd = arena.readonly_fd()?;
        let slot_size = arena.slot_size() as u64;
        let mirrors = match allocate_mirrors(&self.mirrors, &arena) {
            Ok(mirrors) => mirrors,
            Err(e) => {
                // The mirrors allocated before the refusal may have
                // page-locked the arena: they go while it is still mapped.
                self.mirrors.clear();
                return Err(e);
            }
        };
        self.arena = Some(arena);
        let mut state = self.shared.lock();
        let made = state.set_arena(fd, slot_size, lag, mirrors);
        self.shared.notify(state);
        made
    }

    fn publish(&mut self, index: usize, layout: &Layout) -> Result<u64> {
        let rows = layout.rows();
        let used = layout.slot_bytes();
        let encoded = encode_layout(layout)?;
        // Only this thread moves the sequence on: it is still `seq` when
        // the slot is published below.
        let (seq, epoch) = self.shared.lock().next_batch();
        if let Some(arena) = self.arena.as_mut() {
            arena.seal_slot(index, seq, epoch, used, &encoded)?;
            // Without the state lock: the control thread serves consumers
            // while a device copy runs.
            let len = layout_offset(used) as usize + encoded.len();
            copy_to_mirrors(&self.mirrors, arena, index, len)?;
        }
        let mut state = self.shared.lock();
        state.publish(index, seq, rows);
        drop(state);
        self.epoch_batches += 1;
        self.published += 1;
        self.save_state(false)?;
        Ok(seq)
    }

    /// Ends the current epoch: every consumer following it gets its end.
    pub fn end_epoch(&mut self) -> Result<EpochSummary> {
        let (epoch, samples) = self.shared.lock().end_epoch()?;
        self.save_state(true)?;
        Ok(EpochSummary {
            epoch,
            batches: self.epoch_batches,
            samples,
        })
    }

    /// Tells every consumer the stream is over, with `reason`, and releases
    /// the name. Dropping the producer does this with `Finished`.
    pub fn finish(mut self, reason: ShutdownReason) {
        self.shutdown(reason);
    }

    fn shutdown(&mut self, reason: ShutdownReason) {
        // Every consumer is told the stream is over (however it ended):
        // nothing is left to resume. Only a producer that dies without a
        // word leaves its state file.
        if let Some(file) = self.state_file.take() {
            file.finished();
        }
        if let Some(wake) = self.wake.take() {
            if let Ok(frame) = wire::encode(&ToConsumer::Shutdown(reason)) {
                self.shared.lock().shutdown(&frame);
            }
            let _ = std::fs::remove_file(self.endpoint.socket_path());
            let _ = rustix::io::write(&wake, &[1]);
            if let Some(handle) = self.control.take() {
                let _ = handle.join();
            }
            self.shared.lock().remove_all();
        }
        if let Some(lock) = self.lock.take() {
            lock.release();
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.shutdown(ShutdownReason::Finished);
        // The mirrors go before the arena they may have page-locked.
        self.mirrors.clear();
    }
}

/// Reserves lag slot `i`'s memory; false when the kernel refuses it,
/// which is said once (`refused`) in a warning.
fn reserve_lag_slot(
    arena: &Arena,
    i: usize,
    refused: &mut bool,
    opts: &ProducerOptions,
    name: &str,
) -> bool {
    match arena.reserve(i) {
        Ok(()) => true,
        Err(e) => {
            if !*refused {
                *refused = true;
                opts.warn.emit(&format!(
                    "producer {name:?}: the kernel refused memory for \
                     another lag slot ({e}); the lag budget ends here, {} slots short of \
                     max_lag: a consumer further behind now holds the others back (or is \
                     evicted under lag_policy=\"evict\"). Free memory or lower max_lag.",
                    arena.slots() - i
                ));
            }
            false
        }
    }
}

/// Refuses options no producer can follow (a window of 0 slots, a batch
/// size of 0), before anything is claimed.
fn check_options(opts: &ProducerOptions) -> Result<()> {
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
    check_mirrors(&opts.mirrors)
}

/// Listens on `endpoint`'s socket (mode 0600, non-blocking), in place of
/// a stale one.
fn listen(endpoint: &Endpoint) -> Result<UnixListener> {
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
    Ok(listener)
}

/// The bookkeeping of a new producer: resumable when it keeps a state
/// file, and placed at the point it resumes, if it does.
fn initial_state(
    name: &str,
    opts: &ProducerOptions,
    keeps_state: bool,
    resumed: Option<ResumePoint>,
) -> State {
    let mut state = State::new(
        name,
        opts.window,
        opts.batch_size,
        opts.samples_per_epoch,
        opts.lag_policy,
    );
    if let Some(d) = opts.durable.as_ref().filter(|_| keeps_state) {
        state.set_resumable(d.identity.clone());
    }
    if let Some(r) = resumed {
        state.resume_at(r.epoch, r.row);
    }
    state
}

/// Starts the control thread on `listener`; returns it and the write end
/// of the pipe that stops it.
fn start_control(
    name: &str,
    shared: &Arc<Shared>,
    listener: UnixListener,
) -> Result<(JoinHandle<()>, OwnedFd)> {
    let (wake_read, wake_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("cannot create a pipe", e))?;
    let shared = Arc::clone(shared);
    let control = std::thread::Builder::new()
        .name(format!("batchcast-{name}"))
        .spawn(move || control::run(shared, listener, wake_read))
        .map_err(|e| Error::io("cannot start the control thread", e))?;
    Ok((control, wake_write))
}

fn set_mode(path: &std::path::Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("cannot chmod {}", path.display()), e))
}
