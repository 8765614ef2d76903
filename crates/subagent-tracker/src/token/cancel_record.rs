//! Why a signal fired: what a fired signal keeps, hands to its dependents, and leaves in a finished task's
//! record.

use std::sync::Arc;
use std::time::SystemTime;

use crate::CancelCause;

/// Why a signal fired.
#[derive(Clone, Debug)]
pub(crate) struct CancelRecord {
    pub(crate) reason: Arc<str>,
    /// The task whose cancel reached this signal (itself when cancelled directly).
    pub(crate) origin: Arc<str>,
    pub(crate) cause: CancelCause,
    pub(crate) at: SystemTime,
}
