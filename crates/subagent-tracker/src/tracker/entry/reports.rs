//! What a runner reports while its task runs: progress, a pause and the resume that ends it (contract §5,
//! pause and resume), each under the entry's record lock.

use std::sync::Arc;
use std::time::SystemTime;

use crate::token::delivery::Delivery;
use crate::tracker::event_bus::EventBus;
use crate::{ProgressEntry, SubagentEventKind};

use super::{PauseRecord, TaskEntry, MAX_PROGRESS_MESSAGE_BYTES};

impl<V> TaskEntry<V> {
    /// Records a progress report, keeping the latest `log_size` in the log; ignored once the task has finished.
    /// Returns whether it was recorded.
    pub(crate) fn record_progress(
        &self,
        message: &str,
        data: Option<V>,
        log_size: usize,
        bus: &EventBus,
        delivery: &mut Delivery,
    ) -> bool {
        let mut record = self.record.lock();
        if self.is_finished() {
            return false;
        }
        let message: Arc<str> = Arc::from(kept_progress_message(message));
        let mut dropped = None;
        if log_size > 0 {
            if record.progress_log.len() >= log_size {
                dropped = record.progress_log.pop_front();
            }
            record.progress_log.push_back(ProgressEntry {
                at: SystemTime::now(),
                message: message.clone(),
                data,
            });
        }
        record.progress = Some(message);
        record.progress_count += 1;
        if bus.has_subscribers() {
            let event = self.event(SubagentEventKind::Progress, SystemTime::now(), &record);
            bus.publish(&event, delivery);
        }
        // The report that left the log is dropped with no lock held: its data may own foreign objects, whose
        // finalizers may read this task.
        drop(record);
        drop(dropped);
        true
    }

    /// The runner pauses its running task with `reason` (contract §5, pause and resume). False, changing nothing,
    /// if the task is not running.
    pub(crate) fn pause(
        &self,
        reason: Option<Arc<str>>,
        bus: &EventBus,
        delivery: &mut Delivery,
    ) -> bool {
        let mut record = self.record.lock();
        if !self.signal.pause() {
            return false;
        }
        match &mut record.pause {
            Some(pause) => pause.reason = reason,
            None => {
                record.pause = Some(Box::new(PauseRecord {
                    reason,
                    resume_value: None,
                }));
            }
        }
        if bus.has_subscribers() {
            let event = self.event(SubagentEventKind::Paused, SystemTime::now(), &record);
            bus.publish(&event, delivery);
        }
        true
    }

    /// The session resumes the paused task, handing its runner `value`. False, changing nothing, if the task
    /// is not paused.
    pub(crate) fn resume(&self, value: Option<V>, bus: &EventBus, delivery: &mut Delivery) -> bool {
        let mut record = self.record.lock();
        if !self.signal.resume(delivery) {
            // Dropped with no lock held: it may own foreign objects.
            drop(record);
            drop(value);
            return false;
        }
        let pause = record.pause.get_or_insert_with(|| {
            Box::new(PauseRecord {
                reason: None,
                resume_value: None,
            })
        });
        pause.reason = None;
        let replaced = std::mem::replace(&mut pause.resume_value, value);
        if bus.has_subscribers() {
            let event = self.event(SubagentEventKind::Resumed, SystemTime::now(), &record);
            bus.publish(&event, delivery);
        }
        drop(record);
        drop(replaced);
        true
    }
}

/// The part of a progress message that a task keeps: at most [`MAX_PROGRESS_MESSAGE_BYTES`], cut at a
/// character boundary.
#[must_use]
pub fn kept_progress_message(message: &str) -> &str {
    truncate_to_char_boundary(message, MAX_PROGRESS_MESSAGE_BYTES)
}

fn truncate_to_char_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
