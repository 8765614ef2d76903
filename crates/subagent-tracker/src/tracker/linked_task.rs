//! Tasks linked to tokens: a task started with `link_to` is cancelled, with its tree, when any of those
//! tokens fires.

use std::sync::{Arc, Weak};

use crate::token::cancel_record::CancelRecord;
use crate::token::delivery::{Delivery, Dependent, SourceLink};
use crate::token::signal::Registration;
use crate::tracker::engine::TrackerShared;
use crate::tracker::entry::TaskEntry;
use crate::{CancelCause, SubagentTaskToken};

impl<V: Clone + Send + Sync + 'static> TrackerShared<V> {
    /// Cancels `entry` when any of `sources` fires (at once if one already has), until `entry` finishes.
    pub(super) fn link(
        self: &Arc<Self>,
        entry: &Arc<TaskEntry<V>>,
        sources: Vec<SubagentTaskToken>,
        delivery: &mut Delivery,
    ) {
        let action: Arc<dyn Dependent> = Arc::new(LinkedTask {
            tracker: Arc::downgrade(self),
            entry: Arc::downgrade(entry),
        });
        let mut links = Vec::new();
        for source in sources {
            match source.signal().add_dependent(Arc::downgrade(&action)) {
                Registration::Registered(registration) => links.push(SourceLink {
                    source: source.signal().clone(),
                    registration,
                    _action: Some(action.clone()),
                }),
                Registration::Fired(cancel) => {
                    action.source_fired(&cancel, delivery);
                    break;
                }
                Registration::Finished => {}
            }
        }
        delivery.release_sources(&mut entry.signal.keep_sources(links));
    }
}

/// What a source fires for a task linked to it: a cancel of the task's tree, with the source's reason.
struct LinkedTask<V> {
    tracker: Weak<TrackerShared<V>>,
    entry: Weak<TaskEntry<V>>,
}

impl<V: Clone + Send + Sync + 'static> Dependent for LinkedTask<V> {
    fn source_fired(&self, source: &CancelRecord, delivery: &mut Delivery) {
        if let (Some(tracker), Some(entry)) = (self.tracker.upgrade(), self.entry.upgrade()) {
            tracker.cancel_trees([entry], &source.reason, CancelCause::Linked, None, delivery);
        }
    }
}
