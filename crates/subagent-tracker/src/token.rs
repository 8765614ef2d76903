//! The canceller-to-runner signal of one task.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::task_entry::TaskEntry;
use crate::CancelCallback;

/// Fires exactly when its task becomes `Cancelled`: directly, by cascade, or by its session.
///
/// The token of a task that completed or failed never fires afterwards. Checks are one atomic load and take
/// no lock, so a runner can check on every streamed chunk. Clones observe the same task.
pub struct SubagentTaskToken<V = String> {
    entry: Arc<TaskEntry<V>>,
}

impl<V> Clone for SubagentTaskToken<V> {
    fn clone(&self) -> Self {
        SubagentTaskToken {
            entry: self.entry.clone(),
        }
    }
}

impl<V> SubagentTaskToken<V> {
    pub(crate) fn new(entry: Arc<TaskEntry<V>>) -> Self {
        SubagentTaskToken { entry }
    }

    /// The id of the task the token belongs to.
    pub fn task_id(&self) -> &Arc<str> {
        &self.entry.task_id
    }

    /// True once the task is cancelled.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.entry.is_cancelled()
    }

    /// The reason of the cancel that reached the task, once it is cancelled.
    pub fn reason(&self) -> Option<Arc<str>> {
        self.entry.cancel_reason()
    }

    /// Waits until the task is cancelled. Never completes if the task ends without being cancelled.
    pub async fn cancelled(&self) {
        self.entry.cancelled().await
    }

    /// Polls for the cancel; on `Pending`, `context`'s waker is woken when the task is cancelled. The waker is
    /// released unwoken if the task ends without being cancelled.
    pub fn poll_cancelled(&self, context: &mut Context<'_>) -> Poll<()> {
        self.entry.poll_cancelled(context)
    }

    /// Blocks the calling thread until the task is cancelled (true) or `timeout` passes (false).
    pub fn wait_blocking(&self, timeout: Option<Duration>) -> bool {
        self.entry.wait_cancelled_blocking(timeout)
    }

    /// Runs `callback` once when the task is cancelled: at once, in this thread, if it already is; otherwise
    /// in the thread that cancels it, after the cancel has taken effect. If the task ends without being
    /// cancelled the callback is released unrun. A panicking callback does not disturb the canceller or
    /// the other callbacks.
    pub fn on_cancel(&self, callback: impl FnOnce() + Send + 'static) -> CancelCallback
    where
        V: Send + Sync + 'static,
    {
        self.entry.on_cancel(Box::new(callback))
    }

    /// A token that fires when any of `tokens` fires (at once if one already has), with that token's reason.
    ///
    /// It belongs to no task or session. Its registrations on the sources are removed when it fires or when
    /// its last clone is dropped, so combining long-lived tokens leaks nothing.
    pub fn any(tokens: impl IntoIterator<Item = SubagentTaskToken<V>>) -> SubagentTaskToken<V>
    where
        V: Send + Sync + 'static,
    {
        let tokens: Vec<_> = tokens.into_iter().collect();
        let label: Vec<&str> = tokens.iter().map(|token| &*token.entry.task_id).collect();
        let combined = Arc::new(TaskEntry::standalone(Arc::from(format!(
            "any({})",
            label.join(", ")
        ))));
        let registrations = tokens
            .iter()
            .map(|source| {
                let combined = Arc::downgrade(&combined);
                let source_entry = Arc::downgrade(source.entry());
                source.on_cancel(move || {
                    if let Some(combined) = combined.upgrade() {
                        let reason = source_entry
                            .upgrade()
                            .and_then(|source| source.cancel_reason());
                        combined.cancel_standalone(
                            reason.unwrap_or_else(|| Arc::from(crate::DEFAULT_CANCEL_REASON)),
                        );
                    }
                })
            })
            .collect();
        for leftover in combined.keep_links(registrations) {
            leftover.remove();
        }
        SubagentTaskToken::new(combined)
    }

    /// How many callbacks wait on this token: registered, not yet run, not removed. A diagnostic for leaks:
    /// it drops to zero when the task is cancelled (they run) or ends (they are released).
    pub fn callback_count(&self) -> usize {
        self.entry.callback_count()
    }

    pub(crate) fn entry(&self) -> &Arc<TaskEntry<V>> {
        &self.entry
    }

    /// A tokio-util [`CancellationToken`] that fires with this one, for `select!` and APIs that take one.
    /// It is made on first request, and is already cancelled if the task is.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.entry.cancellation_token()
    }
}

impl<V> fmt::Debug for SubagentTaskToken<V> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SubagentTaskToken")
            .field("task_id", &self.entry.task_id)
            .field("is_cancelled", &self.is_cancelled())
            .finish()
    }
}
