//! Registrations of callbacks that run when a task is cancelled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;

/// Something that holds cancel callbacks and can forget one (a task's entry).
pub(crate) trait CallbackHost: Send + Sync {
    /// Removes the callback `id`; true if it was still registered.
    fn remove_callback(&self, id: u64) -> bool;
}

static NEXT_CALLBACK_ID: AtomicU64 = AtomicU64::new(0);

pub(crate) fn next_callback_id() -> u64 {
    NEXT_CALLBACK_ID.fetch_add(1, Ordering::Relaxed)
}

/// A callback registered with [`SubagentTaskToken::on_cancel`](crate::SubagentTaskToken::on_cancel).
///
/// The callback runs once, when the task is cancelled (at once if it already was). It is released, unrun,
/// when the task ends without being cancelled or when [`remove`](Self::remove) is called, so registrations
/// on a long-lived token do not accumulate. Dropping the registration does not remove the callback.
#[derive(Debug, Default)]
pub struct CancelCallback {
    registration: Option<(Weak<dyn CallbackHost>, u64)>,
}

impl std::fmt::Debug for dyn CallbackHost {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("CallbackHost")
    }
}

impl CancelCallback {
    pub(crate) fn registered(host: Weak<dyn CallbackHost>, id: u64) -> CancelCallback {
        CancelCallback {
            registration: Some((host, id)),
        }
    }

    /// A registration with nothing left to remove: its callback already ran, or never will.
    pub(crate) fn spent() -> CancelCallback {
        CancelCallback { registration: None }
    }

    /// Removes the callback; true if it was still waiting (it will now never run).
    pub fn remove(&self) -> bool {
        match &self.registration {
            Some((host, id)) => host.upgrade().is_some_and(|host| host.remove_callback(*id)),
            None => false,
        }
    }
}
