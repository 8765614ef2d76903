//! A session's shared state, and the transitions that span its tasks: lookups, cancel cascades, ends and
//! what they settle (retention, adoption, leaving the registry).
//!
//! A task's record lock may be held while one of the session's own locks is taken: a shard of the id map
//! (level 5 in the crate's lock hierarchy, see the crate root), or a leaf of level 6 (the retention window,
//! which is also taken under a shard's).

use std::collections::HashSet;
use std::sync::{Arc, OnceLock, Weak};
use std::time::SystemTime;

use crossbeam_utils::CachePadded;

use crate::sync::AtomicU64;
use crate::token::delivery::Delivery;
use crate::tracker::config::TrackerConfig;
use crate::tracker::deadline_timer;
use crate::tracker::early_cancels::EarlyCancels;
use crate::tracker::entry::{
    Admission, CancelOutcome, CancelRequest, EndCollapse, EndEffects, Installed, OpenRefusal,
    RunnerEnd, TaskEntry,
};
use crate::tracker::event_bus::EventBus;
use crate::tracker::finished_run::{ClaimRefusal, SharedRun};
use crate::tracker::prefetch::prefetch;
use crate::tracker::reasons::{cancel_reason, CHILD_FAILED_REASON, GROUP_ENDED_REASON};
use crate::tracker::retention::{Eviction, FinishedTasks};
use crate::tracker::run::Run;
use crate::tracker::run_map::{RunMap, Slot};
use crate::tracker::task_filter::TaskFilter;
use crate::{CancelCause, ClaimProblem, SubagentStatus, TrackerError};

/// Where a session is listed (a registry, above this layer), seen only as far as the session needs to leave it.
pub(crate) trait SessionList: Send + Sync {
    /// Removes the session `session_key` (see [`TrackerShared::key`]) if `session_id` still names it.
    fn leave(&self, session_id: &str, session_key: usize);

    /// Whether `session_id` still names the session `session_key` here.
    fn lists(&self, session_id: &str, session_key: usize) -> bool;
}

pub(crate) struct TrackerShared<V> {
    pub(super) session_id: Arc<str>,
    pub(super) config: TrackerConfig,
    /// Every retained run, by id, and which of them are pending (queued, running or paused: not cancelled).
    pub(super) tasks: RunMap<V>,
    // The two fields every lifecycle writes sit on cache lines of their own (which also puts the `Arc`'s
    // reference counts on theirs): a write by one thread then never evicts the read-mostly fields above from
    // the other threads' caches.
    pub(super) finished: CachePadded<FinishedTasks>,
    pub(super) next_sequence: CachePadded<AtomicU64>,
    /// Set once, by `close`, to the reason given.
    pub(super) closed: OnceLock<Arc<str>>,
    pub(super) bus: Arc<EventBus>,
    /// The registry that lists this session, which it leaves once closed with every task finished.
    pub(crate) registry: OnceLock<Weak<dyn SessionList>>,
    /// Cancels recorded for tasks that have not started.
    pub(super) early_cancels: EarlyCancels,
    /// How a child's metadata inherits its parent's (contract §5, inherited metadata), when the store's values
    /// can be merged; without it a child keeps its own metadata, and takes its parent's when it has none.
    pub(crate) metadata_merge: OnceLock<MetadataMerge<V>>,
}

/// How a store merges a parent's metadata with a child's own: the parent's, updated with the child's (each key
/// of the child's replacing the parent's), for values that are mappings.
pub type MetadataMerge<V> = Arc<dyn Fn(&V, V) -> V + Send + Sync>;

impl<V> TrackerShared<V> {
    pub(super) fn new(session_id: Arc<str>, config: TrackerConfig) -> TrackerShared<V> {
        TrackerShared {
            session_id,
            finished: CachePadded::new(FinishedTasks::new(config.max_finished_tasks)),
            config,
            tasks: RunMap::new(),
            next_sequence: CachePadded::new(AtomicU64::new(0)),
            closed: OnceLock::new(),
            bus: Arc::new(EventBus::new()),
            registry: OnceLock::new(),
            early_cancels: EarlyCancels::new(),
            metadata_merge: OnceLock::new(),
        }
    }

    /// Tells this session apart from another of the same id: its address, stable while it lives.
    pub(crate) fn key(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }
}

impl<V: Clone> TrackerShared<V> {
    pub(super) fn session_id(&self) -> &Arc<str> {
        &self.session_id
    }

    pub(super) fn lookup(&self, task_id: &str) -> Option<Run<V>> {
        // Copied out, so that the map's lock is released before the run is used: no task lock is ever taken
        // under a map lock.
        self.tasks.read(task_id, Run::clone)
    }

    /// The entry of `task_id` while it can still change: `None` for an unknown id or a collapsed run (which
    /// has finished, so no cancel or end reaches it).
    pub(super) fn live_entry(&self, task_id: &str) -> Option<Arc<TaskEntry<V>>> {
        self.lookup(task_id).and_then(Run::live)
    }

    pub(super) fn not_claimable(
        &self,
        task_id: &Arc<str>,
        refusal: ClaimRefusal,
        status: SubagentStatus,
    ) -> TrackerError {
        TrackerError::NotClaimable {
            task_id: task_id.clone(),
            session_id: self.session_id.clone(),
            problem: match refusal {
                ClaimRefusal::AlreadyClaimed => ClaimProblem::AlreadyClaimed,
                ClaimRefusal::Ended => ClaimProblem::Ended(status),
            },
        }
    }

    /// Records that `entry`'s runner was stopped by force, on the entry and, once it has finished, on the
    /// record it may have collapsed into.
    pub(super) fn record_escalation(&self, entry: &TaskEntry<V>) {
        entry.record_escalation(|| {
            self.tasks.read(&entry.task_id, |held| {
                if let Run::Finished(run) = held {
                    if run.sequence == entry.sequence {
                        run.record_escalation();
                    }
                }
            });
        });
    }

    /// Indexes a new entry, unless its id is live (or retained at all, when it `restarts` no finished run), and
    /// counts it among the pending unless it `starts_cancelled`. Runs under the new entry's record lock when
    /// `open` takes it (not for a parentless start that nobody listens to). A finished run it replaces goes to
    /// `replaced`, for the caller to drop once no lock is held: the map's reference may be its last.
    pub(super) fn make_visible(
        &self,
        entry: &Arc<TaskEntry<V>>,
        starts_cancelled: bool,
        restarts: bool,
        replaced: &mut Vec<Run<V>>,
    ) -> Result<(), OpenRefusal> {
        self.tasks.write(&entry.task_id, |slot| {
            if let Some(held) = slot.run() {
                if !restarts || !held.is_finished() {
                    return Err(OpenRefusal::DuplicateTask);
                }
                // Under the lock that replaces it, so that a restart never evicts another task and a closed
                // session never counts the new run as finished.
                self.finished.forget(held);
            }
            replaced.extend(slot.put(Run::Live(entry.clone())));
            // Under the lock that made it visible by id, so that whatever finds it by id and moves it out of
            // pending (a cancel, an end) takes it out of the pending runs after this: a task that stopped being
            // pending before is not counted.
            if !starts_cancelled && entry.status().is_pending() {
                slot.index_pending(entry);
            }
            Ok(())
        })
    }

    /// Cancels each pending root with its pending descendants, all at one instant; returns how many tasks
    /// moved (for a single root: zero exactly when that root was not pending). Queued tasks it reaches are
    /// finished too, once the whole cascade has been cancelled.
    ///
    /// A root records `cause` and names `origin` (itself when `None`); its descendants record `Parent` and
    /// name the root's origin. A session-wide cancel reaches every task in its own right, so each records
    /// `Session` and names itself. What it wakes goes to `delivery`.
    pub(super) fn cancel_trees(
        &self,
        roots: impl IntoIterator<Item = Arc<TaskEntry<V>>>,
        reason: &Arc<str>,
        cause: CancelCause,
        origin: Option<&Arc<str>>,
        delivery: &mut Delivery,
    ) -> usize {
        self.cancel_trees_noting(roots, reason, cause, origin, delivery, |_| {})
    }

    /// [`cancel_trees`](Self::cancel_trees), calling `moved` with the sequence of each task it moved.
    pub(super) fn cancel_trees_noting(
        &self,
        roots: impl IntoIterator<Item = Arc<TaskEntry<V>>>,
        reason: &Arc<str>,
        cause: CancelCause,
        origin: Option<&Arc<str>>,
        delivery: &mut Delivery,
        mut noted: impl FnMut(u64),
    ) -> usize {
        let request = CancelRequest {
            reason: reason.clone(),
            at: SystemTime::now(),
        };
        let mut stack = Vec::new();
        let mut children = Vec::new();
        let mut finished_unclaimed = Vec::new();
        let mut moved = 0;
        for root in roots {
            let root_origin = origin.unwrap_or(&root.task_id).clone();
            let root_sequence = root.sequence;
            stack.push(root);
            while let Some(entry) = stack.pop() {
                let (entry_origin, entry_cause) = match cause {
                    CancelCause::Session => (&entry.task_id, CancelCause::Session),
                    _ if entry.sequence == root_sequence => (&root_origin, cause),
                    _ => (&root_origin, CancelCause::Parent),
                };
                let outcome = entry.cancel(
                    &request,
                    entry_origin,
                    entry_cause,
                    &self.bus,
                    delivery,
                    &mut children,
                );
                if let CancelOutcome::NotPending = outcome {
                    continue;
                }
                moved += 1;
                noted(entry.sequence);
                self.tasks.unindex_pending(&entry);
                stack.append(&mut children);
                if let CancelOutcome::CancelledUnclaimed(effects) = outcome {
                    finished_unclaimed.push((entry, effects));
                }
            }
        }
        // After the cascade, so that the children these leave behind are all cancelled and none is adopted; in
        // start order, so that which of them retention evicts first does not depend on the walk.
        finished_unclaimed.sort_unstable_by_key(|(entry, _)| entry.sequence);
        for (entry, effects) in finished_unclaimed {
            self.settle(&entry, effects, delivery);
        }
        moved
    }

    pub(super) fn cancel_running(&self, reason: &Arc<str>) -> usize {
        let running = self.tasks.pending_entries();
        let mut delivery = Delivery::default();
        let moved = self.cancel_trees(running, reason, CancelCause::Session, None, &mut delivery);
        delivery.deliver();
        moved
    }

    /// Cancels the pending tasks that `filter` matches, each as a cancel by id would (cause `Requested`), in one
    /// cascade, and returns the ids of the matching tasks this call moved, in start order: a match that a
    /// concurrent cancel moved first is not among them; one that an earlier match's cascade moved is.
    pub(super) fn cancel_matching<M: Fn(Option<&V>) -> bool>(
        &self,
        filter: &TaskFilter<'_, M>,
        reason: &Arc<str>,
    ) -> Vec<Arc<str>> {
        let matched: Vec<Arc<TaskEntry<V>>> = self
            .tasks
            .pending_entries()
            .into_iter()
            .filter(|entry| {
                filter.matches_status_and_agent(entry.status(), entry.agent.as_deref())
                    && filter
                        .wanted_metadata()
                        .is_none_or(|matches| matches(entry.metadata.as_ref()))
            })
            .collect();
        let mut moved = HashSet::new();
        let mut delivery = Delivery::default();
        self.cancel_trees_noting(
            matched.iter().cloned(),
            reason,
            CancelCause::Requested,
            None,
            &mut delivery,
            |sequence| {
                moved.insert(sequence);
            },
        );
        delivery.deliver();
        matched
            .into_iter()
            .filter(|entry| moved.contains(&entry.sequence))
            .map(|entry| entry.task_id.clone())
            .collect()
    }

    pub(super) fn cancel_entry(&self, entry: &Arc<TaskEntry<V>>, reason: Option<&str>) -> bool {
        let mut delivery = Delivery::default();
        let moved = self.cancel_trees(
            [entry.clone()],
            &cancel_reason(reason),
            CancelCause::Requested,
            None,
            &mut delivery,
        );
        delivery.deliver();
        moved > 0
    }

    /// Records the runner's end of `entry` and does the session's bookkeeping (see `settle`); the wake-ups go
    /// to `deliver`. Returns `None` if it had already finished, otherwise whether this end was the transition.
    pub(super) fn end(
        &self,
        entry: &Arc<TaskEntry<V>>,
        end: RunnerEnd<V>,
        deliver: impl FnOnce(Delivery),
    ) -> Option<bool> {
        let mut delivery = Delivery::default();
        let ended = self.end_into(entry, end, &mut delivery);
        deliver(delivery);
        ended
    }

    pub(super) fn end_into(
        &self,
        entry: &Arc<TaskEntry<V>>,
        end: RunnerEnd<V>,
        delivery: &mut Delivery,
    ) -> Option<bool> {
        let install = (self.config.max_finished_tasks != 0)
            .then_some(|run: SharedRun<V>| self.install_finished(entry, run));
        let effects = entry.end(end, &self.bus, delivery, install)?;
        let transitioned = effects.transitioned;
        self.settle(entry, effects, delivery);
        Some(transitioned)
    }

    /// The session's bookkeeping for a task that has just finished: the pending runs, the tree (its pending
    /// children go to its nearest unfinished ancestor), retention, its timers, and the registry.
    pub(super) fn settle(
        &self,
        entry: &Arc<TaskEntry<V>>,
        effects: EndEffects<V>,
        delivery: &mut Delivery,
    ) {
        if let Some(parent) = &effects.parent {
            parent.forget_child(entry.sequence);
        }
        self.settle_group(entry, &effects, delivery);
        // A cancelled child needs no adopter: no cancel can reach it again. (Most tasks leave no child: they
        // skip the filter.)
        if !effects.orphans.is_empty() {
            let orphans: Vec<_> = effects
                .orphans
                .into_iter()
                .filter(|orphan| orphan.status().is_pending())
                .collect();
            if !orphans.is_empty() {
                self.adopt(effects.parent, orphans, delivery);
            }
        }
        #[cfg(all(test, not(subagent_tracker_loom)))]
        tests::pause(&tests::PAUSE_BEFORE_COLLAPSE, 5);
        // A session that keeps no finished run (a store's local mirror) evicts it at once: nothing to collapse. A
        // run its end collapsed, or tried to, is not offered again. Either way the run leaves the pending runs
        // under the map's lock that this takes.
        let collapse = match effects.collapse {
            EndCollapse::Later if self.config.max_finished_tasks != 0 => {
                entry.collapse(|run| self.install_finished(entry, run))
            }
            collapse => collapse,
        };
        self.evict(match collapse {
            EndCollapse::Installed(evicted) => evicted,
            EndCollapse::Later | EndCollapse::Kept => self.retain_entry(entry),
        });
        // A finished task leaves nothing behind: no timer entry, no registration on the tokens it linked to.
        for key in [effects.deadline_key, effects.claim_timeout_key]
            .into_iter()
            .flatten()
        {
            deadline_timer::unschedule(key);
        }
        self.forget_aged();
        self.leave_registry_if_drained();
    }

    /// The rules of task groups (contract §3) for a task that has just completed or failed: a failure of an
    /// attached child cancels the parent it started under, if that is a group still pending (and so its
    /// siblings), naming the child as origin; a group's own end cancels its pending children. Both cancels
    /// run before adoption, so no child of a group is adopted.
    fn settle_group(
        &self,
        entry: &Arc<TaskEntry<V>>,
        effects: &EndEffects<V>,
        delivery: &mut Delivery,
    ) {
        let status = entry.status();
        // Its own children first: a failing group's children end by its end, not by its parent's cancel.
        if entry.structured && matches!(status, SubagentStatus::Completed | SubagentStatus::Failed)
        {
            let pending = effects
                .orphans
                .iter()
                .filter(|child| child.status().is_pending())
                .cloned();
            self.cancel_trees(
                pending,
                &Arc::from(GROUP_ENDED_REASON),
                CancelCause::Parent,
                Some(&entry.task_id),
                delivery,
            );
        }
        if status == SubagentStatus::Failed && !entry.detached {
            // The parent's current run is the one the child started under when it began before the child: a
            // later run of the id began after that one finished, which was after the child's start.
            let group = entry
                .parent_id
                .as_deref()
                .and_then(|parent_id| self.live_entry(parent_id))
                .filter(|parent| parent.structured && parent.sequence < entry.sequence);
            if let Some(group) = group {
                self.cancel_trees(
                    [group],
                    &Arc::from(CHILD_FAILED_REASON),
                    CancelCause::ChildFailed,
                    Some(&entry.task_id),
                    delivery,
                );
            }
        }
    }

    /// Forgets the finished tasks that ended at or before `cutoff` (contract §7), as eviction would; returns how
    /// many.
    pub(super) fn forget_ended_before(&self, cutoff: SystemTime) -> usize {
        let forgotten = self.finished.forget_ended_before(cutoff);
        for &key in &forgotten {
            drop(self.tasks.remove(key));
        }
        if !forgotten.is_empty() {
            self.leave_registry_if_drained();
        }
        forgotten.len()
    }

    /// Forgets the finished tasks older than the session's `max_finished_age`, if it has one: after each end, and
    /// before each query. Returns the cutoff it used, for a query to leave out an aged task that the window's
    /// order kept (runs are recorded in the order their ends were settled, which may differ from their end
    /// times by a little).
    pub(super) fn forget_aged(&self) -> Option<SystemTime> {
        let cutoff = self
            .config
            .max_finished_age
            .and_then(|age| SystemTime::now().checked_sub(age))?;
        self.forget_ended_before(cutoff);
        Some(cutoff)
    }

    /// Puts the finished record `run` in the id map in place of `entry` and counts it in the retention window,
    /// unless its id has been started again, and takes `entry` out of the pending runs either way. Runs under
    /// `entry`'s record lock (see `TaskEntry::collapse`, and `TaskEntry::end` for a task outside any tree), once
    /// the entry has finished.
    fn install_finished(&self, entry: &Arc<TaskEntry<V>>, run: SharedRun<V>) -> Installed<V> {
        self.tasks.write(&entry.task_id, |slot| {
            slot.unindex_pending(entry);
            if !matches!(slot.run(), Some(Run::Live(live)) if Arc::ptr_eq(live, entry)) {
                return Err(run);
            }
            Ok(self.put_retained(slot, run))
        })
    }

    /// Makes the slot's id name the finished `run` and counts it in the retention window; returns the key of
    /// the run that falls out of the window, if one does. The slot holds nothing, or the entry the run
    /// collapsed from, whose caller holds it too: what this replaces is never dropped here for the last time.
    // Inlined into the end's collapse, the one caller every lifecycle takes.
    #[inline(always)]
    pub(super) fn put_retained(
        &self,
        slot: &mut Slot<'_, V>,
        run: SharedRun<V>,
    ) -> Option<Eviction> {
        let key = slot.key(run.sequence);
        let ended = run.ended_at;
        let run = Run::Finished(run);
        let evicted = self.finished.record(&run, key, ended);
        drop(slot.put(run));
        evicted
    }

    /// Counts the finished `entry`, which keeps its place in the id map, in the retention window, unless its id
    /// has been started again, and takes it out of the pending runs either way; returns the key of the run
    /// that falls out of the window, if one does.
    fn retain_entry(&self, entry: &Arc<TaskEntry<V>>) -> Option<Eviction> {
        // Read before the map's lock: it takes the entry's record lock.
        let ended = entry.ended_at();
        self.tasks.write(&entry.task_id, |slot| {
            slot.unindex_pending(entry);
            match slot.run() {
                Some(held @ Run::Live(live)) if Arc::ptr_eq(live, entry) => {
                    self.finished.record(held, slot.key(entry.sequence), ended)
                }
                _ => None,
            }
        })
    }

    /// Takes the run that fell out of the retention window out of the id map, with no lock held: the map's
    /// reference is its last, and it may own foreign objects. First asks for what the next eviction will read,
    /// which has left the caches in a session that keeps many (`tracker::prefetch`).
    #[inline]
    pub(super) fn evict(&self, evicted: Option<Eviction>) {
        if let Some(Eviction { key, next }) = evicted {
            if let Some(next) = next.filter(|_| self.tasks.is_large()) {
                self.tasks.prefetch(next.key.hash);
                next.allocations.into_iter().for_each(prefetch);
            }
            drop(self.tasks.remove(key));
        }
    }

    /// Whether a registry lists this session now.
    pub(super) fn is_listed(&self) -> bool {
        self.registry
            .get()
            .and_then(Weak::upgrade)
            .is_some_and(|registry| registry.lists(&self.session_id, self.key()))
    }

    /// A closed session in a registry leaves it once none of its tasks is unfinished.
    pub(super) fn leave_registry_if_drained(&self) {
        if self.closed.get().is_none() {
            return;
        }
        let Some(registry) = self.registry.get().and_then(Weak::upgrade) else {
            return;
        };
        // Every retained run is either counted by the retention window or unfinished; a run being recorded or
        // evicted right now is counted on the unfinished side, so the last end to finish its bookkeeping is
        // the one that sees zero.
        if self.tasks.len() <= self.finished.retained() {
            registry.leave(&self.session_id, self.key());
        }
    }

    /// Hands the pending children of a task that finished to its nearest unfinished ancestor, so that the
    /// ancestor's cancel still reaches them; a cancelled ancestor cancels them instead.
    fn adopt(
        &self,
        mut adopter: Option<Arc<TaskEntry<V>>>,
        orphans: Vec<Arc<TaskEntry<V>>>,
        delivery: &mut Delivery,
    ) {
        while let Some(candidate) = adopter {
            match candidate.admit(&orphans) {
                Admission::Admitted => {
                    for orphan in &orphans {
                        if !orphan.set_parent(&candidate) {
                            candidate.forget_child(orphan.sequence);
                        }
                    }
                    return;
                }
                Admission::Cancelled(cancel) => {
                    self.cancel_trees(
                        orphans,
                        &cancel.reason,
                        CancelCause::Parent,
                        Some(&cancel.origin),
                        delivery,
                    );
                    return;
                }
                Admission::Finished(next) => adopter = next,
            }
        }
        // No ancestor is left: the orphans are roots now.
        for orphan in &orphans {
            orphan.clear_parent();
        }
    }

    pub(super) fn record_progress(
        &self,
        entry: &TaskEntry<V>,
        message: &str,
        data: Option<V>,
    ) -> bool {
        let mut delivery = Delivery::default();
        let recorded = entry.record_progress(
            message,
            data,
            self.config.progress_log_size,
            &self.bus,
            &mut delivery,
        );
        delivery.deliver();
        recorded
    }
}

#[cfg(all(test, not(subagent_tracker_loom)))]
mod tests;
