//! [`Waiter`]: waiting for a consumer's next event without holding the
//! consumer.
//!
//! [`Consumer::next_event`](super::Consumer::next_event) takes `&mut self`
//! for the whole wait. A caller that shares the consumer between threads
//! behind a lock (the Python binding) would then block every other call
//! (figures, polling) for as long as the producer takes. A `Waiter` shares
//! only the board's wake word: look with
//! [`try_next_event`](super::Consumer::try_next_event) under the lock,
//! then sleep here with the lock released.

use std::sync::Arc;
use std::time::Duration;

use super::link::Link;
use crate::board::Woken;

/// Sleeps until the producer signals a change, for a consumer's thread
/// that does not hold the consumer while asleep. Made by
/// [`Consumer::waiter`](super::Consumer::waiter).
///
/// The loop that waits for an event: read [`Waiter::wake_word`], then look
/// for an event (`try_next_event`), and only if there is none call
/// [`Waiter::sleep`] with the word read before looking. A change after the
/// word was read makes the sleep return at once, so no wake-up is lost.
/// (Events that arrive on the socket alone, such as an epoch's end, are
/// seen at the next timeout.)
#[derive(Clone)]
pub struct Waiter {
    link: Arc<Link>,
}

impl Waiter {
    pub(super) fn new(link: Arc<Link>) -> Waiter {
        Waiter { link }
    }

    /// The wake word now: read it before looking for an event.
    pub fn wake_word(&self) -> u32 {
        self.link.board.wake_word()
    }

    /// Sleeps until the wake word differs from `seen` or `timeout` passes;
    /// true if woken by a change.
    pub fn sleep(&self, seen: u32, timeout: Duration) -> bool {
        self.link.board.sleep(seen, timeout) == Woken::Changed
    }
}
