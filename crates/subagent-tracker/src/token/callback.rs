//! Registrations of callbacks that run when a token fires.

use std::sync::Weak;

use crate::token::signal::CancelSignal;

/// A callback registered with [`SubagentTaskToken::on_cancel`](crate::SubagentTaskToken::on_cancel).
///
/// The callback runs once, when the token fires (at once if it already had). It is released, unrun, when the
/// task ends without being cancelled or when [`remove`](Self::remove) is called, so registrations on a
/// long-lived token do not accumulate. Dropping the registration does not remove the callback.
#[derive(Debug, Default)]
pub struct CancelCallback {
    registration: Option<(Weak<CancelSignal>, u64)>,
}

impl std::fmt::Debug for CancelSignal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("CancelSignal")
            .field("status", &self.status())
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

impl CancelCallback {
    pub(crate) fn registered(signal: Weak<CancelSignal>, id: u64) -> CancelCallback {
        CancelCallback {
            registration: Some((signal, id)),
        }
    }

    /// A registration with nothing left to remove: its callback already ran, or never will.
    pub(crate) fn spent() -> CancelCallback {
        CancelCallback { registration: None }
    }

    /// Removes the callback; true if it was still waiting (it will now never run).
    pub fn remove(&self) -> bool {
        match &self.registration {
            Some((signal, id)) => signal
                .upgrade()
                .is_some_and(|signal| signal.remove_callback(*id)),
            None => false,
        }
    }
}
