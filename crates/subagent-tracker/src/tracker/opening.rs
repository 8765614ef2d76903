//! How tasks enter a session: started with their runner, or reserved for one to claim; one at a time or in a
//! batch that opens whole or not at all.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use foldhash::fast::RandomState;

use crate::task_id::{generate_id, validate_task_id};
use crate::time::Deadline;
use crate::token::cancel_record::CancelRecord;
use crate::token::delivery::Delivery;
use crate::tracker::engine::TrackerShared;
use crate::tracker::entry::{OpenRefusal, RunnerEnd, TaskEntry};
use crate::tracker::reasons::BATCH_REFUSED_REASON;
use crate::tracker::run::Run;
use crate::{CancelCause, SubagentTaskToken, TaskStart, TrackerError};

/// How a task of a batch will begin, foreseen before the batch opens anything.
struct BeginsAs {
    cancelled: bool,
    /// A reservation that begins cancelled: it finishes as it opens.
    finishes: bool,
    deadline: Option<Deadline>,
}

/// How a task enters the session.
#[derive(Clone, Copy)]
pub(super) enum Opening {
    /// With its runner, which holds the handle.
    Start,
    /// Queued for a runner to claim, failing if none has within `claim_timeout`.
    Reserve { claim_timeout: Option<Duration> },
    /// Started by another runtime's event (contract §5, event-sourced ingestion): as `Start`, but an id the
    /// session retains, even finished, is a repeat, never a restart.
    Recorded,
}

impl<V: Clone + Send + Sync + 'static> TrackerShared<V> {
    /// Opens every task of a batch, or none: everything the batch and the session's state refuse is found
    /// before the first task opens. The checks run in the order the Redis store runs them: every task's ids
    /// and the batch's repeats first, then the session, then each task in turn.
    pub(super) fn open_batch(
        self: &Arc<Self>,
        mut batch: Vec<(TaskStart<V>, Opening)>,
    ) -> Result<Vec<Arc<TaskEntry<V>>>, TrackerError> {
        let mut named = std::collections::HashSet::with_capacity_and_hasher(
            batch.len(),
            RandomState::default(),
        );
        for (start, _) in &mut batch {
            let task_id = start
                .task_id
                .get_or_insert_with(|| Arc::from(generate_id()));
            validate_task_id("task_id", task_id)?;
            if let Some(parent_id) = &start.parent_id {
                validate_task_id("parent_id", parent_id)?;
            }
        }
        for (start, _) in &batch {
            let task_id = start.task_id.clone().unwrap_or_default();
            if !named.insert(task_id.clone()) {
                return Err(TrackerError::DuplicateInBatch { task_id });
            }
        }
        if self.closed.get().is_some() {
            return Err(TrackerError::SessionClosed {
                session_id: self.session_id.clone(),
            });
        }
        // How each task of the batch will begin: a reservation that begins cancelled finishes as it opens, so
        // it can be no later task's parent.
        let mut opened_here: std::collections::HashMap<Arc<str>, BeginsAs, RandomState> =
            std::collections::HashMap::with_capacity_and_hasher(
                batch.len(),
                RandomState::default(),
            );
        let now = Instant::now();
        for (start, opening) in &batch {
            let task_id = start.task_id.clone().unwrap_or_default();
            if self
                .lookup(&task_id)
                .is_some_and(|retained| !retained.is_finished())
            {
                return Err(TrackerError::DuplicateTask {
                    task_id,
                    session_id: self.session_id.clone(),
                });
            }
            let (inherits_cancel, inherited_deadline) = match &start.parent_id {
                None => (false, None),
                Some(parent_id) => {
                    let parent_finished = || TrackerError::ParentFinished {
                        parent_id: Arc::from(parent_id.as_str()),
                        session_id: self.session_id.clone(),
                    };
                    if let Some(here) = opened_here.get(parent_id.as_str()) {
                        if here.finishes {
                            return Err(parent_finished());
                        }
                        (here.cancelled, here.deadline)
                    } else {
                        let parent = self.lookup(parent_id).ok_or_else(|| {
                            TrackerError::unknown_task(parent_id, &self.session_id)
                        })?;
                        match parent {
                            Run::Live(parent) if !parent.is_finished() => {
                                (parent.is_cancelled(), parent.deadline)
                            }
                            _ => return Err(parent_finished()),
                        }
                    }
                }
            };
            let (inherits_cancel, inherited_deadline) = if start.detached {
                (false, None)
            } else {
                (inherits_cancel, inherited_deadline)
            };
            let deadline = match (start.deadline, inherited_deadline) {
                (Some(own), Some(inherited)) => Some(own.earlier(inherited)),
                (own, inherited) => own.or(inherited),
            };
            let cancelled = inherits_cancel
                || self.early_cancels.peek(&task_id).is_some()
                || deadline.is_some_and(|deadline| deadline.instant <= now)
                || start.linked.iter().any(SubagentTaskToken::is_cancelled);
            let finishes = cancelled && matches!(opening, Opening::Reserve { .. });
            opened_here.insert(
                task_id,
                BeginsAs {
                    cancelled,
                    finishes,
                    deadline,
                },
            );
        }
        let mut opened: Vec<(Arc<TaskEntry<V>>, bool)> = Vec::with_capacity(batch.len());
        for (start, opening) in batch {
            let with_runner = matches!(opening, Opening::Start);
            match self.open(start, opening) {
                Ok(entry) => opened.push((entry, with_runner)),
                Err(refusal) => {
                    // Another thread changed the session after the checks (started one of these ids, ended or
                    // cancelled a parent, closed it): what the batch opened is cancelled and finished.
                    for (entry, with_runner) in opened {
                        self.cancel_entry(&entry, Some(BATCH_REFUSED_REASON));
                        if with_runner {
                            // No runner ever got its handle: the task is finished here, as a dropped handle's.
                            self.end(&entry, RunnerEnd::Stopped, Delivery::deliver);
                        }
                    }
                    return Err(refusal);
                }
            }
        }
        Ok(opened.into_iter().map(|(entry, _)| entry).collect())
    }

    /// A child's metadata (contract §5, inherited metadata): a child started in its parent's reach starts with
    /// its parent's metadata, updated with its own; a detached child, or a root, keeps its own. (Out of line: it
    /// kept `open`, the hottest path, from inlining what it calls.)
    #[inline(never)]
    fn inherited_metadata(
        &self,
        parent: Option<&Arc<TaskEntry<V>>>,
        detached: bool,
        own: Option<V>,
    ) -> Option<V> {
        let Some(inherited) = parent
            .filter(|_| !detached)
            .and_then(|parent| parent.metadata.as_ref())
        else {
            return own;
        };
        match (own, self.metadata_merge.get()) {
            (None, _) => Some(inherited.clone()),
            (Some(own), Some(merge)) => Some(merge(inherited, own)),
            (Some(own), None) => Some(own),
        }
    }

    /// Makes a new task live in the session (the common part of `start` and `reserve`).
    pub(super) fn open(
        self: &Arc<Self>,
        start: TaskStart<V>,
        opening: Opening,
    ) -> Result<Arc<TaskEntry<V>>, TrackerError> {
        let task_id: Arc<str> = match start.task_id {
            Some(task_id) => {
                validate_task_id("task_id", &task_id)?;
                task_id
            }
            None => Arc::from(generate_id()),
        };
        // Its place in a large map has left the caches: fetched while the entry is built.
        self.tasks.prefetch_id(&task_id);
        if let Some(parent_id) = &start.parent_id {
            validate_task_id("parent_id", parent_id)?;
        }
        if self.closed.get().is_some() {
            return Err(TrackerError::SessionClosed {
                session_id: self.session_id.clone(),
            });
        }
        let parent = match &start.parent_id {
            Some(parent_id) => match self.lookup(parent_id) {
                Some(Run::Live(parent)) => Some(parent),
                Some(Run::Finished(_)) => {
                    return Err(TrackerError::ParentFinished {
                        parent_id: Arc::from(parent_id.as_str()),
                        session_id: self.session_id.clone(),
                    })
                }
                None => return Err(TrackerError::unknown_task(parent_id, &self.session_id)),
            },
            None => None,
        };
        // A child never outlives its parent's deadline, unless it was started out of the parent's reach.
        let inherited_deadline = parent
            .as_ref()
            .filter(|_| !start.detached)
            .and_then(|parent| parent.deadline);
        let deadline = match (start.deadline, inherited_deadline) {
            (Some(own), Some(inherited)) => Some(own.earlier(inherited)),
            (own, inherited) => own.or(inherited),
        };
        // Merged before any lock is taken: a store's merge may run foreign code.
        let metadata = self.inherited_metadata(parent.as_ref(), start.detached, start.metadata);
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed);
        // `Arc::new`, which copies the struct into its allocation (about 25 instructions), rather than
        // `new_cyclic`, which builds it there but sets the count with a locked instruction (BENCHMARKS.md).
        let entry = Arc::new(TaskEntry::new(
            sequence,
            task_id,
            parent.clone(),
            start.agent,
            start.description,
            metadata,
            deadline,
            [
                start.detached,
                start.structured,
                matches!(opening, Opening::Reserve { .. }),
            ],
            SystemTime::now(),
        ));
        let mut delivery = Delivery::default();
        let mut replaced = Vec::new();
        // The entry holds the id from here on: reading it there saves the reference count a copy would cost.
        let task_id = &entry.task_id;
        // A cancel recorded for this id before it started: the task begins cancelled by it.
        let early = self.early_cancels.peek(task_id).map(|reason| CancelRecord {
            reason,
            origin: task_id.clone(),
            cause: CancelCause::Requested,
            at: entry.started_at,
        });
        let begins_cancelled_early = early.is_some();
        let opened = entry.open(
            parent.as_ref(),
            early,
            |starts_cancelled| {
                let restarts = !matches!(opening, Opening::Recorded);
                self.make_visible(&entry, starts_cancelled, restarts, &mut replaced)
            },
            &self.bus,
            &mut delivery,
        );
        // With no lock held: it may be the last reference to a run that owns foreign objects.
        drop(replaced);
        let finished_unclaimed = match opened {
            Ok(effects) => effects,
            Err(refusal) => {
                delivery.deliver();
                return Err(match refusal {
                    OpenRefusal::DuplicateTask => TrackerError::DuplicateTask {
                        task_id: task_id.clone(),
                        session_id: self.session_id.clone(),
                    },
                    OpenRefusal::ParentFinished => TrackerError::ParentFinished {
                        parent_id: Arc::from(start.parent_id.unwrap_or_default()),
                        session_id: self.session_id.clone(),
                    },
                });
            }
        };
        if let Some(effects) = finished_unclaimed {
            self.settle(&entry, effects, &mut delivery);
        }
        // Taken now that the task is visible: a cancel recorded while it opened reaches it here, and one it began
        // cancelled by is used up.
        if let Some(reason) = self.early_cancels.take(task_id) {
            if !begins_cancelled_early {
                self.cancel_trees(
                    [entry.clone()],
                    &reason,
                    CancelCause::Requested,
                    None,
                    &mut delivery,
                );
            }
        }
        if let Opening::Reserve {
            claim_timeout: Some(claim_timeout),
        } = opening
        {
            self.arm_claim_timeout(&entry, claim_timeout);
        }
        if let Some(deadline) = deadline {
            self.arm_deadline(&entry, deadline, &mut delivery);
        }
        if !start.linked.is_empty() {
            self.link(&entry, start.linked, &mut delivery);
        }
        if let Some(reason) = self.closed.get() {
            // `close` may have swept the running tasks before this one became visible; finish its work here.
            self.cancel_trees(
                [entry.clone()],
                reason,
                CancelCause::Session,
                None,
                &mut delivery,
            );
        }
        delivery.deliver();
        Ok(entry)
    }
}
