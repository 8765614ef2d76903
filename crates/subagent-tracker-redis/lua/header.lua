--[[
The transitions of subagent-tracker sessions stored in Redis: each function runs atomically on the server, so
the first transition out of a pending status wins across every process.

Files. This header, then the rules the core states (`PENDING`: written from `SubagentStatus::is_pending` by
`src/library.rs`, which assembles the library; the task groups' reasons), then the shared helpers of
`lua/includes/` (each uses only those before it: clock, session, keys, tasks, session_state, events, retention,
cascade, task_groups, metadata, open, liveness, register), then one file per server function in
`lua/functions/`, named as the function without its `stv2_` prefix. Each function's
file opens with its keys and arguments, `(keys; arguments)`, what it returns, and its Rust counterpart.

Functions, by the slot they work in, and who calls them in Rust:

  a session's slot (KEYS[1] is the session's hash; every key the function reads or writes is named from it)
    stv2_open, stv2_open_batch    RedisSession::start, reserve, start_batch, reserve_batch
    stv2_claim                    RedisSession::claim
    stv2_cancel                   RedisSession::cancel, cancel_before_start (and a linked token's cancel)
    stv2_cancel_all               RedisSession::cancel_all, close
    stv2_cancel_matching          RedisSession::cancel_matching
    stv2_end                      RedisTaskHandle::complete, fail, fail_with, stopped (and Drop);
                                  RedisSession::end, fail
    stv2_progress                 RedisTaskHandle::progress
    stv2_pause, stv2_resume       RedisTaskHandle::pause; RedisSession::resume
    stv2_escalate                 RedisTaskHandle::record_escalation
    stv2_get, stv2_list           RedisSession::get, get_run, tasks, pending
    stv2_handling                 RedisSession::cancel_and_wait
    stv2_restore                  RedisSession::restore
    stv2_handled                  the worker's report that a cancel's handlers are done (Worker::report_handled)
    stv2_forget_finished          RedisSession::forget_finished
    stv2_session                  RedisRegistry::get_session, sessions; RedisSession::is_closed
    stv2_touch                    RedisRegistry::session
    stv2_status, stv2_drop_lost   the worker's reconcile (Worker::reconcile)
    stv2_fire                     the worker's timer loop (Worker::fire)
    stv2_reap, stv2_orphans,      the reaper (Worker::reap_expired) and the orphan check (Worker::end_orphans)
    stv2_end_orphans
    stv2_sweep                    the idle sweep (Worker::sweep_idle_sessions)
  the registry's slot (every key carries the tag `{registry}`)
    stv2_schedule, stv2_due,      the timer index: which sessions have a timer due (Worker::schedule,
    stv2_retime                   fire_due_timers)
    stv2_index, stv2_idle         the session index (Worker::index_session, sweep_idle_sessions)
    stv2_lease, stv2_expired,     worker leases (Worker::renew_lease, reap_expired, announce)
    stv2_forget, stv2_announce
    stv2_drop_stale               trims a registry index (Worker::sweep_idle_sessions, forget_idle_sessions)
    stv2_unlock                   the reaper's lock (Worker::reap)

Version. The library's name, its function names (`stv2_*`) and the key layout (`<prefix>v2:...`) carry one version
together: a library of another version loads beside this one, calls none of its functions and reads none of its
keys, so two fleets of different versions never run each other's rules (see docs/across-processes.md).

Keys. Every key of a session shares the session's hash tag, `{s:<session>}`, with the session's id percent-encoded
(`%`, `{` and `}` only), so no id can close the tag early or reach another session's keys, and a session lives in
one cluster slot. Registry-wide keys share the tag `{registry}`. Every function touches the keys of one slot. KEYS[1]
is the session's hash (`<prefix>v2:{s:<session>}:session`); the session's other keys are named from it. The last
key every function is called with is its slot's guard, `<prefix>v2:{s:<session>}:guard` (or `{registry}:guard`),
which no function touches and nothing ever writes: while the slot moves between cluster nodes, a call that
declares a key the node lacks is refused before it runs (`ASK`, then `TRYAGAIN`), so no function ever runs on half
a session (`function_call` in `src/store.rs`).

  <base>session        hash: inc (the incarnation: the server's clock in milliseconds times 1000 when the
                       session's keys were made; run numbers count on from it, event ids start with it), seq (the
                       last run number), closed (the first close reason), max (max_finished_tasks), max_age
                       (max_finished_age, in microseconds, if set), early_ttl (early_cancel_ttl, in microseconds),
                       log_size (progress_log_size), touched (the server's time of the last change, in
                       milliseconds), ev (the id of the last event), fins (how many runs have joined the finished
                       list: a listing's position in it), removing ("1" while the session is removed in steps:
                       `begin_removal`; it has no inc then). Read once and written once per call
                       (`session_function`), however many tasks the call starts or ends
  <base>t:<task>       hash: the task's current run (fields below)
  <base>c:<run>        set: ids of the attached children of run <run> (kept while the run is retained, so a
                       cascade walks through finished tasks to their pending descendants)
  <base>linked         set: the ids of retained tasks whose run is in a parent's children set or has a set of
                       its own (and, at times, ids that no longer are): the runs eviction must release
                       (`release_run`) rather than just delete
  <base>live           sorted set: the ids of unfinished tasks (queued, running, or cancelled with their runner
                       yet to stop) by run, from the start to the end
  <base>finished       list: the ids of the retained finished runs, in the order they finished (a run replaced by a
                       new run of its id leaves it); its length is the count against the bound
  <base>timers         sorted set: "d\t<task>\t<run>" (a deadline) and "c\t<task>\t<run>" (a claim timeout) by
                       when they fall due, in milliseconds since the epoch; `stv2_fire` fires the due ones
  <base>early          hash: task id -> "<expiry, microseconds since the epoch>\t<reason>", a cancel recorded for
                       the id's next start (`cancel_subagent_task(..., before_start=True)`)
  <base>early_order    sorted set: the ids of `early` by expiry, to drop expired records and the oldest beyond
                       MAX_EARLY_CANCELS
  <base>events         stream: the session's lifecycle events in the order they took effect, with ids
                       <ms>-<inc + 1>, <ms>-<inc + 2>, ...: the server's clock (never behind the last id) and the
                       event's number, counted on from the incarnation's. A reader that was trimmed past knows
                       how many it missed; one whose events Redis lost (a restart from older state) sees the
                       number go back, and one of an ended incarnation sees it jump, while every new event's id
                       is still past what it read. Trimmed to about EVENT_LIMIT entries. Each entry has task,
                       kind, status, at, and reason or message; cancels and ends name their run

A task lives in as few keys as the rules need, because each key a lifecycle writes is a server call, and the calls
are what a lifecycle costs the server: its hash, the live index while unfinished, the finished list once finished,
and its events. A call writes each index once as it ends, however many tasks it starts or ends
(`write_gathered`), and evicts beyond the bound once; many starts or ends in one call are how the registry
coalesces its callers (`src/coalesce.rs`). The retained tasks in start order are the live index and the finished
list merged by run; the
tasks a worker process runs are the live ones whose `worker` field names it (the reaper reads them from the live
index, which is rare work, rather than every lifecycle keeping a set per process).

Run numbers are unique across the incarnations of a session id and across server restarts: each run's number is
past the session's last and past the server's clock in microseconds (`next_run`), and each incarnation starts
from that clock, so a runner, a notification or an end of an earlier incarnation, or of a run that a restart from
older state or a failover to a lagging replica lost, never matches a later run.

A worker process is named by its own key: the worker id users gave, a slash and a per-process nonce. It names the
process's lease, its runs (their `worker` field) and its channel, so that two processes given one id never take
each other's runs for their own; snapshots show the id alone.

Task fields: id, run, status (queued|running|paused|completed|failed|cancelled), fin ("1" once finished), parent, lp/lr
(the task whose children set holds this one, and its run), agent, description, metadata, detached, structured, reserved,
worker (the process that runs it), started_at, claimed_at, cancelled_at, ended_at, reason, origin, cause, result,
error, error_type, error_code, progress, progress_count, pl<n> (the progress log: report number n, as
"<at>:<message's byte length>:<message><data>", the latest log_size kept), deadline (seconds) and due_ms,
claim_error, on_end (what its end does beyond the common path: "t" remove a timer, "g" settle a task group's
rule, or "tg"; absent for neither), parent_of ("1" once it has had attached children), pause_reason (while
paused, and kept when a paused run ends), pauses (how many times the run paused), handling (the run, while its worker
process has yet to report its cancel handlers done), resume_value (JSON text: what the latest resume handed the runner).

Cancels of tasks that a worker process runs are published to "<prefix>v2:worker:<process>", one message per
process and cancel, each run as its session (as encoded in the keys), task, run, reason, origin and cause (see
`fields_message`); a lost message is found by the process's reconcile (`stv2_status`). A resume goes the same
way, with the value (or "") as its reason, the number of the pause it ends as its origin and "resume" as its
cause; so does an end by id of a paused run, with "ended" as its cause, for the runner that waits for its resume.

Every session function takes as its first argument the incarnation that the caller's session object belongs to
('' where the caller follows whatever incarnation is there: a worker's housekeeping). A transition or query for
another incarnation, or for a session whose keys are gone, is refused with GONE: the caller's session has ended.
]]
