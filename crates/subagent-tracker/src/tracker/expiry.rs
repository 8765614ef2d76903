//! What a session's timers do: a deadline cancels its task's tree, and a claim timeout fails a reservation
//! nobody claimed. Both reach the session and the task weakly, so a timer never keeps either alive.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::time::Deadline;
use crate::token::delivery::Delivery;
use crate::tracker::deadline_timer::{self, Expire};
use crate::tracker::engine::TrackerShared;
use crate::tracker::entry::{RunnerEnd, TaskEntry};
use crate::tracker::reasons::{claim_timeout_error, DEADLINE_REASON};
use crate::CancelCause;

impl<V: Clone + Send + Sync + 'static> TrackerShared<V> {
    /// Cancels `entry` when `deadline` passes, on the shared timer thread; at once if it already has.
    pub(super) fn arm_deadline(
        self: &Arc<Self>,
        entry: &Arc<TaskEntry<V>>,
        deadline: Deadline,
        delivery: &mut Delivery,
    ) {
        if deadline.instant <= Instant::now() {
            self.cancel_trees(
                [entry.clone()],
                &Arc::from(DEADLINE_REASON),
                CancelCause::Deadline,
                None,
                delivery,
            );
            return;
        }
        let expiry = DeadlineExpiry {
            tracker: Arc::downgrade(self),
            entry: Arc::downgrade(entry),
        };
        let key = deadline_timer::schedule(deadline.instant, Box::new(expiry));
        if !entry.keep_deadline_key(key) {
            // It finished in the meantime and will never look for the key.
            deadline_timer::unschedule(key);
        }
    }

    /// Fails `entry` if it is still queued when `claim_timeout` has passed.
    pub(super) fn arm_claim_timeout(
        self: &Arc<Self>,
        entry: &Arc<TaskEntry<V>>,
        claim_timeout: Duration,
    ) {
        let Some(at) = Instant::now().checked_add(claim_timeout) else {
            return;
        };
        let expiry = ClaimExpiry {
            tracker: Arc::downgrade(self),
            entry: Arc::downgrade(entry),
            claim_timeout,
        };
        let key = deadline_timer::schedule(at, Box::new(expiry));
        if !entry.keep_claim_timeout_key(key) {
            deadline_timer::unschedule(key);
        }
    }
}

/// The timer's way back to a reservation whose claim timeout passed.
struct ClaimExpiry<V> {
    tracker: Weak<TrackerShared<V>>,
    entry: Weak<TaskEntry<V>>,
    claim_timeout: Duration,
}

impl<V: Clone + Send + Sync + 'static> Expire for ClaimExpiry<V> {
    fn expire(&self, delivery: &mut Delivery) {
        if let (Some(tracker), Some(entry)) = (self.tracker.upgrade(), self.entry.upgrade()) {
            let error = claim_timeout_error(self.claim_timeout);
            tracker.end_into(&entry, RunnerEnd::ClaimExpired(Arc::from(error)), delivery);
        }
    }
}

/// The timer's way back to a task whose deadline passed.
struct DeadlineExpiry<V> {
    tracker: Weak<TrackerShared<V>>,
    entry: Weak<TaskEntry<V>>,
}

impl<V: Clone + Send + Sync + 'static> Expire for DeadlineExpiry<V> {
    fn expire(&self, delivery: &mut Delivery) {
        if let (Some(tracker), Some(entry)) = (self.tracker.upgrade(), self.entry.upgrade()) {
            tracker.cancel_trees(
                [entry],
                &Arc::from(DEADLINE_REASON),
                CancelCause::Deadline,
                None,
                delivery,
            );
        }
    }
}
