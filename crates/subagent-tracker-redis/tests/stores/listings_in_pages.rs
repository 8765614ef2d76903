//! Contract §6 on Redis: listings page through the server, a bounded page per call, and the whole listings are
//! built from the pages.

use std::collections::HashSet;

use crate::common::{cli, RedisServer};
use subagent_tracker::{SubagentStatus, TaskStart, TrackerConfig};
use subagent_tracker_redis::MAX_PAGE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_pages_through_every_retained_task_and_the_whole_listing_is_in_start_order() {
    let server = RedisServer::start();
    let worker = server.worker("p1:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let mut running = Vec::new();
    for index in 0..250 {
        let mut handle = session
            .start(TaskStart::new().task_id(format!("t{index:03}")))
            .await
            .unwrap();
        if index % 2 == 0 {
            handle.complete(None).await.unwrap();
        } else {
            running.push(handle);
        }
    }
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let (page, next) = session
            .tasks_page(false, cursor.as_deref(), 40)
            .await
            .unwrap();
        assert!(page.len() <= 40);
        pages += 1;
        paged.extend(page.into_iter().map(|task| task.task_id.to_string()));
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert!(pages >= 250 / 40, "{pages} pages");
    assert_eq!(paged.len(), 250);
    // Unfinished first, in start order; then the finished, in the order they finished.
    let odd: Vec<String> = (1..250)
        .step_by(2)
        .map(|index| format!("t{index:03}"))
        .collect();
    let even: Vec<String> = (0..250)
        .step_by(2)
        .map(|index| format!("t{index:03}"))
        .collect();
    assert_eq!(paged[..125], odd[..]);
    assert_eq!(paged[125..], even[..]);
    let whole: Vec<String> = session
        .tasks()
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.task_id.to_string())
        .collect();
    let in_start_order: Vec<String> = (0..250).map(|index| format!("t{index:03}")).collect();
    assert_eq!(whole, in_start_order);
    let (pending, next) = session.tasks_page(true, None, MAX_PAGE * 10).await.unwrap();
    assert_eq!(
        pending.len(),
        MAX_PAGE,
        "a page reads at most MAX_PAGE tasks"
    );
    assert!(next.is_some());
    assert_eq!(session.pending().await.unwrap().len(), 125);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_that_pages_while_tasks_finish_lists_each_task_once_in_its_last_state() {
    let server = RedisServer::start();
    let worker = server.worker("p2:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let mut handles = Vec::new();
    for index in 0..300 {
        handles.push(
            session
                .start(TaskStart::new().task_id(format!("t{index:03}")))
                .await
                .unwrap(),
        );
    }
    let (first, cursor) = session.tasks_page(false, None, 100).await.unwrap();
    assert_eq!(first.len(), 100);
    // Tasks already listed, and tasks not yet listed, finish between the pages.
    for handle in handles.iter_mut().step_by(3) {
        handle.complete(None).await.unwrap();
    }
    let mut seen: Vec<String> = first.iter().map(|task| task.task_id.to_string()).collect();
    let mut cursor = cursor;
    while let Some(next) = cursor {
        let (page, after) = session.tasks_page(false, Some(&next), 100).await.unwrap();
        seen.extend(page.iter().map(|task| task.task_id.to_string()));
        cursor = after;
    }
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(
        distinct.len(),
        300,
        "every task retained throughout is listed"
    );
    let whole = session.tasks().await.unwrap();
    assert_eq!(whole.len(), 300, "the whole listing keeps each id once");
    for (index, task) in whole.iter().enumerate() {
        let expected = if index % 3 == 0 {
            SubagentStatus::Completed
        } else {
            SubagentStatus::Running
        };
        assert_eq!(task.status, expected, "{}", task.task_id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_ends_even_where_redis_lost_the_count_of_finished_runs() {
    let server = RedisServer::start();
    let worker = server.worker("p3:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    for index in 0..120 {
        let mut handle = session
            .start(TaskStart::new().task_id(format!("t{index:03}")))
            .await
            .unwrap();
        handle.complete(None).await.unwrap();
    }
    // The finished list outlives the count the cursors are positions in (an older hash restored, say).
    cli(server.port, &["HSET", "p3:v2:{s:s}:session", "fins", "7"]);
    let listing = tokio::time::timeout(std::time::Duration::from_secs(10), session.tasks()).await;
    let listed = listing.expect("the listing ends").unwrap();
    let ids: HashSet<String> = listed
        .into_iter()
        .map(|task| task.task_id.to_string())
        .collect();
    assert_eq!(ids.len(), 120);
}
