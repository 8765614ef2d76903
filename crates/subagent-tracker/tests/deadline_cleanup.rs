//! One test alone in its process: the timer's count of pending deadlines is global to the process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use subagent_tracker::{pending_deadlines, InMemorySubagentTaskTracker, TaskStart};

#[test]
fn tasks_that_finish_first_leave_no_timers_or_callbacks_behind() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..20_000)
        .map(|index| {
            let start = TaskStart::new()
                .task_id(index.to_string())
                .timeout(Duration::from_secs(3600));
            let handle = tracker.start(start).unwrap();
            let counter = runs.clone();
            handle.token().on_cancel(move || {
                counter.fetch_add(1, Ordering::Relaxed);
            });
            handle
        })
        .collect();
    assert_eq!(pending_deadlines(), 20_000);
    let tokens: Vec<_> = handles
        .iter()
        .map(subagent_tracker::SubagentTaskHandle::token)
        .collect();
    for handle in &handles {
        handle.complete(None);
    }
    assert_eq!(pending_deadlines(), 0);
    assert!(tokens.iter().all(|token| token.callback_count() == 0));
    assert_eq!(runs.load(Ordering::Relaxed), 0);

    // Reservations hold a claim timeout and a deadline each; claimed, cancelled or ended by id, they leave
    // neither behind.
    let hour = Duration::from_secs(3600);
    for index in 0..300 {
        let start = TaskStart::new()
            .task_id(format!("queued-{index}"))
            .timeout(hour);
        tracker.reserve(start, Some(hour)).unwrap();
    }
    assert_eq!(pending_deadlines(), 600);
    for index in 0..100 {
        assert!(tracker
            .claim(&format!("queued-{index}"))
            .unwrap()
            .complete(None));
    }
    for index in 100..200 {
        assert!(tracker.cancel(&format!("queued-{index}"), None));
    }
    for index in 200..300 {
        assert!(tracker.end(&format!("queued-{index}"), Err("gone")));
    }
    assert_eq!(pending_deadlines(), 0);
}
