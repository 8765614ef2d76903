"""A model-based test of the whole contract, on both stores: hypothesis drives two sessions (in memory, then
on a real ``redis-server``) through random steps and after every step compares every snapshot (by query, by
listing and by handle), both listings' order, whether each session is closed, every token and every kept
``any`` token with a plain-Python model of the contract. One model checks both stores: where the contract lets
Redis differ, ``Store`` says so, in one place.

Steps: starts (ids reused or generated, unknown and finished parents, detached children, past deadlines and
far timeouts, links to tokens of both sessions, ``any`` tokens kept or held only by the link), reservations
(§18: the same, and far claim timeouts) and claims (of queued, claimed, started, cancelled, ended and unknown
ids), ends (complete, fail, late ends after a cancel, second ends, a parent ending before its children, ends
of unclaimed reservations recorded by id), cancels (by id, a subtree, the session, close), retention with
small bounds, finished tasks forgotten by age, cancels recorded before their task starts, and finished ids
started or reserved again.

The model is written to be obviously correct, not fast: it keeps every run with a pointer to the run it was
started under, and a cancel walks that tree, through finished runs (their running children are adopted by the
nearest live ancestor) but not past a detached child, even a finished one. A queued run is pending like a
running one, but no runner runs it: a cancel finishes it at once. Where the contract leaves an order open
(which of two links that fire in one cancel reaches a task first; deadline or link when both cancel a task
during its start; which already-fired source an ``any`` token takes its reason from; which error a start that
breaks two rules raises; which of the queued runs that one cancel finishes is evicted first), the model
accepts every outcome the contract allows and then follows the build's. A queued run evicted as it finishes
(it has no handle to show it) is never seen again, so any cause the contract allows it is taken.
A child started under a cancelled parent starts cancelled by its parent even when its own deadline has passed
or a token it links to has fired: it never starts running, so no other cause applies.
Claim timeouts are not modelled (they depend on time); reservations get none, or one that never passes.

A failure prints the steps, shrunk, and a ``@reproduce_failure`` blob. ``--hypothesis-show-statistics`` shows
how often the rarer situations came up (the ``event`` calls).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from redis_support import RedisCluster, RedisServer

from subagent_tracker import (
    CHILD_FAILED_REASON,
    GROUP_ENDED_REASON,
    CancellationToken,
    DuplicateTaskError,
    RedisRegistry,
    Session,
    SessionClosedError,
    SessionProtocol,
    SubagentTask,
    TaskHandleProtocol,
    UnknownTaskError,
)

QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED = "queued", "running", "completed", "failed", "cancelled"
PAUSED = "paused"
PENDING = (QUEUED, RUNNING, PAUSED)
DEFAULT_REASON = "cancelled"
DEADLINE_REASON = "deadline exceeded"
TIMEOUT = 3600.0  # never passes during a test
#: How far a snapshot's deadline may be from the model's (the model notes the time just before the start).
DEADLINE_TOLERANCE = 5.0

MAIN_IDS = ["a", "b", "c", "d", "e"]
EXTERNAL_IDS = ["x", "y"]
UNKNOWN_ID = "nobody"

# --- the model


class ModelSession:
    """What one session holds: the retained runs by id, the retained finished runs in the order they ended
    (in groups: the runs of one group finished together, in an order the contract leaves open)."""

    def __init__(self, name: str, max_finished: int) -> None:
        self.name = name
        self.max_finished = max_finished
        self.closed = False
        self.retained: dict[str, Run] = {}
        self.finished: list[list[Run]] = []
        #: Cancels recorded for the next start of an id (§3, cancel before start): their reasons.
        self.early: dict[str, str] = {}

    def listed(self) -> list[Run]:
        return sorted(self.retained.values(), key=lambda run: run.sequence)

    def pending(self) -> list[Run]:
        return [run for run in self.listed() if run.status in PENDING]

    def forget(self, run: Run) -> None:
        """Takes a finished run out of the retention window (its id started again)."""
        for group in self.finished:
            if run in group:
                group.remove(run)
        self.finished = [group for group in self.finished if group]

    def evict(self, still_retained: Callable[[Run], bool]) -> None:
        """Evicts the runs that finished first while more than ``max_finished`` are retained. When only some
        runs of a group go, ``still_retained`` tells which the build kept."""
        excess = sum(len(group) for group in self.finished) - self.max_finished
        while excess > 0:
            group = self.finished[0]
            if len(group) <= excess:
                evicted = self.finished.pop(0)
            else:
                evicted = [run for run in group if not still_retained(run)]
                assert len(evicted) == excess, (
                    f"{self.name} evicted {evicted} of {group}, which finished together; expected {excess}"
                )
                group[:] = [run for run in group if run not in evicted]
                event("end: evicted some of the runs that finished together")
            for run in evicted:
                event("end: evicted a finished run")
                assert self.retained[run.task_id] is run
                del self.retained[run.task_id]
            excess -= len(evicted)


class Run:
    """One run of a task id: what its snapshot should show. A reserved run is queued until it is claimed."""

    def __init__(
        self,
        session: ModelSession,
        sequence: int,
        task_id: str,
        parent: Run | None,
        parent_id: str | None,
        detached: bool,
        deadline: float | None,
        links: list[Token],
        reserved: bool,
    ) -> None:
        self.session = session
        self.sequence = sequence
        self.task_id = task_id
        self.parent = parent
        self.parent_id = parent_id
        self.detached = detached
        self.deadline = deadline
        self.links = links
        self.children: list[Run] = []
        self.reserved = reserved
        # A task group (§3): set by the machine after the start.
        self.structured = False
        self.claimed = False
        self.status = QUEUED if reserved else RUNNING
        self.finished = False
        self.cancel_reason: str | None = None
        self.cancel_origin: str | None = None
        self.cancel_cause: str | None = None
        self.result: object = None
        self.error: str | None = None
        # Why its runner paused it (§5): cleared by a resume, kept by a cancel or an end.
        self.pause_reason: str | None = None
        self.token = Token(run=self)

    def __repr__(self) -> str:
        return f"<run {self.session.name}:{self.task_id}#{self.sequence}>"

    def in_reach(self) -> list[Run]:
        """Every run a cascade from this one passes through: its descendants, however finished, but not across
        a detached child (a finished task's children are adopted by its nearest live ancestor)."""
        found: list[Run] = []
        stack = [child for child in self.children if not child.detached]
        while stack:
            run = stack.pop()
            found.append(run)
            stack.extend(child for child in run.children if not child.detached)
        return found

    def reaching_ancestors(self) -> list[Run]:
        """The ancestors whose cascade reaches this run, nearest first."""
        ancestors: list[Run] = []
        run = self
        while not run.detached and run.parent is not None:
            run = run.parent
            ancestors.append(run)
        return ancestors


class Token:
    """A task's token (``run`` set) or an ``any`` combination (``sources`` set)."""

    def __init__(self, run: Run | None = None, sources: list[Token] | None = None) -> None:
        self.run = run
        self.sources = sources or []
        self.any_fired = False
        self.any_reason: str | None = None

    @property
    def fired(self) -> bool:
        return self.run.status == CANCELLED if self.run is not None else self.any_fired

    @property
    def reason(self) -> str | None:
        if self.run is not None:
            return self.run.cancel_reason
        return self.any_reason


class Cascade:
    """What one cancel did: the runs it moved, and for each the (cause, origin) pairs the contract allows."""

    def __init__(self) -> None:
        self.moved: list[Run] = []
        self.allowed: dict[Run, set[tuple[str, str]]] = {}
        self.roots: set[Run] = set()
        # The origin a task group's cancel names in place of its roots' own ids (None for any other cancel).
        self.origin: str | None = None

    def settle(self, observed: dict[Run, tuple[str | None, str | None]]) -> None:
        """Checks the causes and origins the build recorded and makes the model follow them. A run missing
        from ``observed`` (a queued run evicted as the cancel finished it) can never be seen again: the model
        takes any allowed cause for it."""
        for run in self.moved:
            if run not in observed:
                continue
            cause, origin = observed[run]
            assert cause is not None and origin is not None, f"{run!r} shows no cancel cause or origin"
            assert (cause, origin) in self.allowed[run], (
                f"{run!r} shows cause {cause!r} origin {origin!r}; allowed: {sorted(self.allowed[run])}"
            )
            if cause == "parent" and (self.origin is None or origin != self.origin):
                # It was reached by that root's cascade; so were the moved runs in between, and the root was
                # cancelled in its own right.
                ancestors = run.reaching_ancestors()
                root = next(
                    ancestor
                    for ancestor in ancestors
                    if ancestor.task_id == origin and ancestor in self.roots
                )
                if root in observed:
                    assert observed[root][1] == root.task_id, (
                        f"{root!r} reached {run!r} but names another origin"
                    )
                for between in ancestors[: ancestors.index(root)]:
                    if between in self.allowed and between in observed:
                        assert observed[between] == ("parent", origin), (
                            f"{run!r} was reached from {root!r} through {between!r}, which shows "
                            f"{observed[between]}"
                        )
        for run in self.moved:
            run.cancel_cause, run.cancel_origin = observed.get(run, min(self.allowed[run]))


class Model:
    def __init__(self, max_finished: int) -> None:
        self.main = ModelSession("main", max_finished)
        self.external = ModelSession("external", max_finished)
        self.runs: list[Run] = []
        self.anys: list[Token] = []

    def start_errors(
        self, session: ModelSession, task_id: str | None, parent_id: str | None
    ) -> set[type[Exception]]:
        """The errors a start may raise (any one of them when several apply); empty when it must succeed."""
        if session.closed:
            return {SessionClosedError}
        errors: set[type[Exception]] = set()
        if task_id is not None and task_id in session.retained and not session.retained[task_id].finished:
            errors.add(DuplicateTaskError)
        if parent_id is not None:
            parent = session.retained.get(parent_id)
            if parent is None or parent.finished:
                errors.add(UnknownTaskError)
        return errors

    def start(
        self,
        session: ModelSession,
        task_id: str,
        parent_id: str | None,
        detached: bool,
        deadline: float | None,
        links: list[Token],
        now: float,
        reserved: bool = False,
    ) -> tuple[Run, set[tuple[str, str]]]:
        """Starts (or reserves) a run; returns it and the (cause, reason) pairs one of which must cancel it
        during start (origin itself), or an empty set when the model already knows its state."""
        parent = session.retained[parent_id] if parent_id is not None else None
        if parent is not None and not detached and parent.deadline is not None:
            deadline = parent.deadline if deadline is None else min(deadline, parent.deadline)
        old = session.retained.get(task_id)
        if old is not None:
            # A finished id started again: the new run replaces the old one, which leaves retention.
            assert old.finished
            session.forget(old)
            event("start: a finished id started again")
        run = Run(session, len(self.runs), task_id, parent, parent_id, detached, deadline, links, reserved)
        self.runs.append(run)
        session.retained[task_id] = run
        # A cancel recorded for this id is used up by this start, even when the parent's cancel comes first.
        early = session.early.pop(task_id, None)
        if parent is not None:
            parent.children.append(run)
        if parent is not None and not detached and parent.status == CANCELLED:
            run.status = CANCELLED
            run.cancel_reason = parent.cancel_reason
            run.cancel_origin = parent.cancel_origin
            run.cancel_cause = "parent"
            event("start: under a cancelled parent")
            if reserved:
                self.finish_unclaimed([run])
                event("reserve: under a cancelled parent")
            return run, set()
        if early is not None:
            # It begins cancelled by the recorded cancel, before any deadline or link could cancel it.
            event("start: cancelled by a cancel recorded before it")
            return run, {("requested", early)}
        choices: set[tuple[str, str]] = set()
        if deadline is not None and deadline <= now:
            choices.add(("deadline", DEADLINE_REASON))
        for token in links:
            if token.fired:
                assert token.reason is not None
                choices.add(("linked", token.reason))
        if choices:
            event(f"start: cancelled during start, {len(choices)} way(s)")
        return run, choices

    def settle_start(self, run: Run, cause: str, reason: str) -> None:
        queued = run.status == QUEUED
        run.status = CANCELLED
        run.cancel_cause, run.cancel_reason, run.cancel_origin = cause, reason, run.task_id
        if queued:
            self.finish_unclaimed([run])
            event("reserve: cancelled during the reservation")

    def finish_unclaimed(self, runs: list[Run]) -> None:
        """Finishes queued runs that were just cancelled (no runner runs them), together: the session's
        evictions follow (``ModelSession.evict``)."""
        for session in (self.main, self.external):
            group = [run for run in runs if run.session is session]
            for run in group:
                assert run.reserved and not run.claimed and run.status == CANCELLED
                run.finished = True
            if group:
                session.finished.append(group)

    def end(self, run: Run, status: str, result: object, error: str | None) -> bool:
        """The end a runner reports, or one recorded by id; the session's evictions follow."""
        if run.finished:
            return False
        won = run.status in PENDING
        if won:
            run.status = status
        run.result, run.error = result, error
        run.finished = True
        run.session.finished.append([run])
        return won

    def claim_error(self, session: ModelSession, task_id: str) -> type[Exception] | None:
        """The error a claim must raise, or None when it must succeed."""
        run = session.retained.get(task_id)
        if run is None:
            return UnknownTaskError
        if not run.reserved:
            event("claim: of a started run")
            return DuplicateTaskError
        if run.claimed:
            event("claim: of a claimed run")
            return DuplicateTaskError
        if run.status in (COMPLETED, FAILED):
            event("claim: of a reservation ended unclaimed")
            return DuplicateTaskError
        return None

    def claim(self, run: Run) -> None:
        """A queued run now runs; a reservation cancelled (and so finished) before its claim stays so."""
        assert run.status in (QUEUED, CANCELLED)
        run.claimed = True
        if run.status == QUEUED:
            run.status = RUNNING

    def new_any(self, sources: list[Token]) -> tuple[Token, set[str]]:
        """A new ``any`` token; returns it and the reasons it may already carry (empty: it has not fired)."""
        token = Token(sources=sources)
        self.anys.append(token)
        return token, {source.reason for source in sources if source.fired and source.reason is not None}

    def cancel(self, targets: list[Run], reason: str, cause: str, origin: str | None = None) -> Cascade:
        """Cancels the pending ``targets`` (cause ``cause``, origin themselves or ``origin``), their pending
        descendants, and whatever their tokens reach through links and ``any`` tokens, all with ``reason``.
        The queued runs it moves are finished, together, once all are cancelled."""
        cascade = Cascade()
        cascade.origin = origin
        initial = [run for run in targets if run.status in PENDING]
        moved: set[Run] = set()
        fired_anys: set[Token] = set()

        def fires(token: Token) -> bool:
            return token.run in moved if token.run is not None else token in fired_anys

        roots = set(initial)
        changed = True
        while changed:
            changed = False
            for root in list(roots):
                for run in [root, *root.in_reach()]:
                    if run.status in PENDING and run not in moved:
                        moved.add(run)
                        changed = True
            for token in self.anys:
                if not token.fired and token not in fired_anys and any(fires(s) for s in token.sources):
                    fired_anys.add(token)
                    changed = True
            for run in self.runs:
                if run.status in PENDING and run not in moved and any(fires(t) for t in run.links):
                    moved.add(run)
                    roots.add(run)
                    changed = True
        linked_roots = {run for run in moved if run not in initial and any(fires(t) for t in run.links)}
        cascade.roots = set(initial) | linked_roots
        cascade.moved = sorted(moved, key=lambda run: run.sequence)
        queued = [run for run in cascade.moved if run.status == QUEUED]
        for run in cascade.moved:
            # The origin a cascade from `root` names: a task group's cancel names the task that set it off.
            def origin_of(root: Run) -> str:
                return origin if origin is not None and root in initial else root.task_id

            if run in initial:
                allowed = {(cause, origin_of(run))}
                if cause != "session":
                    # Of many roots (a cancel by filter), one may reach another first by its cascade.
                    allowed |= {
                        ("parent", origin_of(ancestor))
                        for ancestor in run.reaching_ancestors()
                        if ancestor in initial
                    }
            else:
                allowed = {("linked", run.task_id)} if run in linked_roots else set()
                allowed |= {
                    ("parent", origin_of(ancestor))
                    for ancestor in run.reaching_ancestors()
                    if ancestor in cascade.roots
                }
            assert allowed, f"the model moved {run!r} without a way to reach it"
            cascade.allowed[run] = allowed
            run.status = CANCELLED
            run.cancel_reason = reason
        for token in fired_anys:
            token.any_fired, token.any_reason = True, reason
        self.finish_unclaimed(queued)
        for run in cascade.moved:
            ancestors = run.reaching_ancestors()
            if any(
                a in cascade.roots and any(b.finished for b in ancestors[:i]) for i, a in enumerate(ancestors)
            ):
                event("cancel: a cascade reached a run past a finished ancestor")
            if run in linked_roots:
                event("cancel: a link fired")
            if len(cascade.allowed[run]) > 1:
                event("cancel: the order of links is open")
        if fired_anys:
            event("cancel: an any token fired")
        if queued:
            event("cancel: finished a queued run")
        if len(queued) > 1:
            event("cancel: finished queued runs together")
        return cascade


# --- the stores


class Store:
    """A store the machine drives: it makes the two sessions of one example.

    Where the contract lets a store differ from the model, it says so here, and only here. Redis differs in
    two ways the model can see (contract section 20). A cancel takes effect in Redis when the call returns,
    but a runner's token fires in its own process a notification later, and a token linked to a task cancels
    that task in Redis a round trip after it fires. So on Redis the machine waits, for at most
    ``settle_within`` seconds, until what it compares has caught up; in memory everything has settled when a
    call returns.

    And a handle's snapshot: in memory the handle keeps its run, so it has a snapshot for ever; Redis keeps
    nothing of a run once it is evicted or its id starts again, so the handle's snapshot is ``None`` then
    (``handles_keep_their_run``)."""

    settle_within = 0.0
    handles_keep_their_run = True

    def sessions(self, max_finished: int) -> dict[str, SessionProtocol]:
        raise NotImplementedError


class MemoryStore(Store):
    def sessions(self, max_finished: int) -> dict[str, SessionProtocol]:
        return {
            "main": Session("main", max_finished_tasks=max_finished),
            "external": Session("external", max_finished_tasks=max_finished),
        }


class RedisStore(Store):
    """Sessions on one ``redis-server``, or on a Redis Cluster: each example opens two of its own, with ids
    never used before (so on a cluster they land on different primaries)."""

    # Notifications arrive in a millisecond on loopback; the reconcile timer bounds a lost one.
    settle_within = 1.0
    handles_keep_their_run = False

    def __init__(self, url: str) -> None:
        self.registry = RedisRegistry(url, reconcile_interval=0.25)
        self.examples = itertools.count()

    def sessions(self, max_finished: int) -> dict[str, SessionProtocol]:
        example = next(self.examples)
        return {
            name: self.registry.session(f"{name}-{example}", max_finished_tasks=max_finished)
            for name in ("main", "external")
        }


# --- the machine


class Started:
    """A run the machine started or claimed, with the handle it keeps alive (a dropped handle would fail the
    task)."""

    def __init__(self, run: Run, handle: TaskHandleProtocol) -> None:
        self.run = run
        self.handle = handle

    @property
    def token(self) -> CancellationToken:
        return self.handle.token

    @property
    def model_token(self) -> Token:
        return self.run.token

    def __repr__(self) -> str:
        return repr(self.run)


class Combined:
    """A kept ``CancellationToken.any`` and its model."""

    def __init__(self, token: CancellationToken, model: Token, label: int) -> None:
        self.token = token
        self.model_token = model
        self.label = label

    def __repr__(self) -> str:
        return f"<any#{self.label} of {self.model_token.sources}>"


def _observed_fields(snapshot: SubagentTask) -> dict[str, object]:
    return {
        "task_id": snapshot.task_id,
        "parent_id": snapshot.parent_id,
        "detached": snapshot.detached,
        "status": snapshot.status.value,
        "finished": snapshot.finished,
        "cancel_reason": snapshot.cancel_reason,
        "cancel_origin": snapshot.cancel_origin,
        "cancel_cause": snapshot.cancel_cause,
        "result": snapshot.result,
        "error": snapshot.error,
        "pause_reason": snapshot.pause_reason,
        "cancelled_at is set": snapshot.cancelled_at is not None,
        "ended_at is set": snapshot.ended_at is not None,
        "deadline is set": snapshot.deadline is not None,
        "queued_at is set": snapshot.queued_at is not None,
        "claimed_at is set": snapshot.claimed_at is not None,
    }


def _expected_fields(run: Run) -> dict[str, object]:
    return {
        "task_id": run.task_id,
        "parent_id": run.parent_id,
        "detached": run.detached,
        "status": run.status,
        "finished": run.finished,
        "cancel_reason": run.cancel_reason,
        "cancel_origin": run.cancel_origin,
        "cancel_cause": run.cancel_cause,
        "result": run.result,
        "error": run.error,
        "pause_reason": run.pause_reason,
        "cancelled_at is set": run.status == CANCELLED,
        "ended_at is set": run.finished,
        "deadline is set": run.deadline is not None,
        "queued_at is set": run.reserved,
        "claimed_at is set": run.claimed,
    }


def _check_snapshot(snapshot: SubagentTask, run: Run) -> None:
    assert _observed_fields(snapshot) == _expected_fields(run), repr(run)
    if run.deadline is not None:
        assert snapshot.deadline is not None
        assert math.isclose(snapshot.deadline, run.deadline, abs_tol=DEADLINE_TOLERANCE), repr(run)
    if snapshot.queued_at is not None:
        assert snapshot.queued_at == snapshot.started_at, repr(run)


reasons = st.sampled_from([None, "stop", "halt"])
detach = st.sampled_from([False, False, True])
task_ids = st.sampled_from(MAIN_IDS) | st.none()
deadlines = st.sampled_from(["none", "none", "none", "past", "timeout"])
claim_timeouts = st.sampled_from([None, None, TIMEOUT])
ends = st.sampled_from(["complete", "fail", "raise"])
session_names = st.sampled_from(["main", "external"])


class ContractMachine(RuleBasedStateMachine):
    runs = Bundle("runs")
    reserved = Bundle("reserved")
    combined = Bundle("combined")

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.model = Model(0)
        self.sessions: dict[str, SessionProtocol] = {}
        self.started: list[Started] = []
        self.handles: dict[Run, TaskHandleProtocol] = {}
        self.kept_anys: list[Combined] = []

    @initialize(target=runs, max_finished=st.sampled_from([0, 1, 2, 3, 5]))
    def make_sessions(self, max_finished: int) -> object:
        self.model = Model(max_finished)
        self.sessions = self.store.sessions(max_finished)
        # So that ``runs`` is never empty: rules that link to a token always have one to draw.
        return self._start("external", "x")

    def _model_session(self, name: str) -> ModelSession:
        return self.model.main if name == "main" else self.model.external

    def _settled(self, check: Callable[[], None]) -> None:
        """Runs ``check`` until it passes, for as long as the store may take to settle (see ``Store``)."""
        deadline = time.monotonic() + self.store.settle_within
        while True:
            try:
                check()
                return
            except AssertionError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)

    def _snapshot(self, run: Run) -> SubagentTask | None:
        """``run``'s snapshot, by its handle; for an unclaimed reservation, which has none, by its id (the
        caller knows the id still names ``run``): None once evicted."""
        handle = self.handles.get(run)
        if handle is not None:
            return handle.snapshot()
        return self.sessions[run.session.name].subagent_task(run.task_id)

    def _check_handle(self, started: Started) -> None:
        """A handle's snapshot is its run's (or, on a store whose handles do not keep their run, ``None``
        once the session retains it no more)."""
        run = started.run
        snapshot = started.handle.snapshot()
        if self.store.handles_keep_their_run or run.session.retained.get(run.task_id) is run:
            assert snapshot is not None, f"{run!r} has no snapshot by its handle"
            _check_snapshot(snapshot, run)
        else:
            assert snapshot is None, f"{run!r} is not retained, yet its handle has a snapshot"

    def _still_retained(self, run: Run) -> bool:
        return self.sessions[run.session.name].subagent_task(run.task_id) is not None

    def _retain(self) -> None:
        """Evicts from the model what the sessions no longer retain, after a step that finished runs."""
        self.model.main.evict(self._still_retained)
        self.model.external.evict(self._still_retained)

    def _observe(self, cascade: Cascade) -> None:
        observed: dict[Run, tuple[str | None, str | None]] = {}

        def every_moved_run_shows_its_cancel() -> None:
            observed.clear()
            for run in cascade.moved:
                snapshot = self._snapshot(run)
                if snapshot is None:
                    continue
                assert snapshot.cancel_cause is not None, f"{run!r} shows no cancel cause"
                observed[run] = (snapshot.cancel_cause, snapshot.cancel_origin)

        self._settled(every_moved_run_shows_its_cancel)
        if len(observed) < len(cascade.moved):
            event("cancel: a queued run was evicted as it finished")
        cascade.settle(observed)

    def _start(
        self,
        session_name: str,
        task_id: str | None,
        parent_id: str | None = None,
        detached: bool = False,
        deadline: str = "none",
        linked: tuple[Started | Combined, ...] = (),
        inline_any: tuple[Started | Combined, ...] = (),
        reserve: bool = False,
        claim_timeout: float | None = None,
        structured: bool = False,
    ) -> object:
        """Starts a task, or with ``reserve`` reserves one; returns its ``Started``, or its ``Run``."""
        session = self.sessions[session_name]
        model_session = self._model_session(session_name)
        tokens = [source.token for source in linked]
        model_tokens = [source.model_token for source in linked]
        if inline_any:
            # Not kept by this machine: only the task's link holds it.
            unkept = CancellationToken.any(*(source.token for source in inline_any))
            model_any, reasons_now = self.model.new_any([source.model_token for source in inline_any])
            self._settle_any(unkept, model_any, reasons_now)
            tokens.append(unkept)
            model_tokens.append(model_any)
            del unkept
        errors = self.model.start_errors(model_session, task_id, parent_id)
        now = time.time()
        own_deadline = {"none": None, "past": now - 1, "timeout": now + TIMEOUT}[deadline]
        verb = "reserve" if reserve else "start"
        handle: TaskHandleProtocol | None = None
        try:
            if reserve:
                new_id = session.reserve_subagent_task(
                    task_id,
                    parent_id=parent_id,
                    detached=detached,
                    deadline=own_deadline if deadline == "past" else None,
                    timeout=TIMEOUT if deadline == "timeout" else None,
                    linked=tokens,
                    claim_timeout=claim_timeout,
                    structured=structured,
                )
            else:
                handle = session.start_subagent_task(
                    task_id,
                    parent_id=parent_id,
                    detached=detached,
                    deadline=own_deadline if deadline == "past" else None,
                    timeout=TIMEOUT if deadline == "timeout" else None,
                    linked=tokens,
                    structured=structured,
                )
                new_id = handle.task_id
        except (DuplicateTaskError, UnknownTaskError, SessionClosedError) as error:
            event(f"{verb}: raised {type(error).__name__}")
            assert type(error) in errors, f"{verb} raised {error!r}; the model expected {errors or 'success'}"
            return multiple()
        assert not errors, f"{verb} succeeded; the model expected one of {errors}"
        if task_id is None:
            assert new_id not in model_session.retained, "a generated id must be new"
        else:
            assert new_id == task_id
        run, choices = self.model.start(
            model_session, new_id, parent_id, detached, own_deadline, model_tokens, time.time(), reserve
        )
        run.structured = structured
        started = None
        if handle is not None:
            self.handles[run] = handle
            started = Started(run, handle)
            self.started.append(started)
        if choices:
            snapshot = self._snapshot(run)
            shown: tuple[str | None, str | None]
            if snapshot is None:
                # A reservation finished by its cancel and evicted at once: it is never seen again.
                event("reserve: evicted as it was cancelled")
                shown = min(choices)
            else:
                assert snapshot.cancel_origin == run.task_id, f"{run!r} was cancelled during {verb}"
                shown = (snapshot.cancel_cause, snapshot.cancel_reason)
            cause, reason = shown
            assert cause is not None and reason is not None, f"{run!r} was not cancelled during {verb}"
            assert (cause, reason) in choices, (
                f"{run!r} shows {(cause, reason)} after {verb}; allowed: {choices}"
            )
            self.model.settle_start(run, cause, reason)
        self._retain()
        return run if started is None else started

    def _settle_any(self, token: CancellationToken, model: Token, reasons_now: set[str]) -> None:
        assert token.is_cancelled == bool(reasons_now), f"any of {model.sources}"
        if reasons_now:
            assert token.reason in reasons_now, f"any of {model.sources} fired with {token.reason!r}"
            model.any_fired, model.any_reason = True, token.reason

    @rule(
        target=runs,
        task_id=task_ids,
        parent_id=st.none() | st.sampled_from([*MAIN_IDS, UNKNOWN_ID]),
        detached=detach,
        deadline=deadlines,
    )
    def start(self, task_id: str | None, parent_id: str | None, detached: bool, deadline: str) -> object:
        return self._start("main", task_id, parent_id, detached, deadline)

    @rule(target=runs, task_id=task_ids, parent_id=st.none() | st.sampled_from(MAIN_IDS), detached=detach)
    def start_group(self, task_id: str | None, parent_id: str | None, detached: bool) -> object:
        """Starts a task group (§3): a failing child cancels it, and its end cancels its pending children."""
        return self._start("main", task_id, parent_id, detached, structured=True)

    @rule(target=runs, task_id=task_ids, parent=runs | reserved, detached=detach, deadline=deadlines)
    def start_child(
        self, task_id: str | None, parent: Started | Run, detached: bool, deadline: str
    ) -> object:
        """Starts a task under the id of a run started or reserved before (which may now name a newer run, or
        none)."""
        parent_run = parent.run if isinstance(parent, Started) else parent
        if parent_run.session is not self.model.main:
            return multiple()
        return self._start("main", task_id, parent_run.task_id, detached, deadline)

    @rule(target=runs, task_id=task_ids, detached=detach, deadline=deadlines)
    def start_under_newest_running(self, task_id: str | None, detached: bool, deadline: str) -> object:
        """Starts a task under the newest pending (running, queued or paused) task of the main session, so
        that trees grow deep."""
        pending = self.model.main.pending()
        parent_id = pending[-1].task_id if pending else None
        return self._start("main", task_id, parent_id, detached, deadline)

    @rule(
        target=runs,
        task_id=task_ids,
        parent_id=st.none() | st.sampled_from(MAIN_IDS),
        deadline=deadlines,
        linked=st.lists(runs | combined, max_size=2).map(tuple),
        inline_any=st.lists(runs | combined, max_size=2).map(tuple),
    )
    def start_linked(
        self,
        task_id: str | None,
        parent_id: str | None,
        deadline: str,
        linked: tuple[Started | Combined, ...],
        inline_any: tuple[Started | Combined, ...],
    ) -> object:
        """Starts a task linked to tokens, and to an ``any`` of ``inline_any`` that only the link keeps."""
        return self._start("main", task_id, parent_id, False, deadline, linked, inline_any)

    @rule(target=runs, task_id=st.sampled_from(EXTERNAL_IDS) | st.none())
    def start_external(self, task_id: str | None) -> object:
        """A task of another session, whose token main tasks may link to."""
        return self._start("external", task_id)

    @rule(
        target=reserved,
        task_id=task_ids,
        parent_id=st.none() | st.sampled_from([*MAIN_IDS, UNKNOWN_ID]),
        detached=detach,
        deadline=deadlines,
        linked=st.lists(runs | combined, max_size=2).map(tuple),
        claim_timeout=claim_timeouts,
    )
    def reserve(
        self,
        task_id: str | None,
        parent_id: str | None,
        detached: bool,
        deadline: str,
        linked: tuple[Started | Combined, ...],
        claim_timeout: float | None,
    ) -> object:
        """Reserves a task for a runner to claim later (§18), perhaps linked to tokens."""
        return self._start(
            "main", task_id, parent_id, detached, deadline, linked, reserve=True, claim_timeout=claim_timeout
        )

    @rule(
        target=reserved,
        task_id=task_ids,
        parent=runs | reserved,
        detached=detach,
        deadline=deadlines,
        claim_timeout=claim_timeouts,
    )
    def reserve_child(
        self,
        task_id: str | None,
        parent: Started | Run,
        detached: bool,
        deadline: str,
        claim_timeout: float | None,
    ) -> object:
        """Reserves a task under the id of a run started or reserved before (which may now name a newer run,
        or none)."""
        parent_run = parent.run if isinstance(parent, Started) else parent
        if parent_run.session is not self.model.main:
            return multiple()
        return self._start(
            "main", task_id, parent_run.task_id, detached, deadline, reserve=True, claim_timeout=claim_timeout
        )

    @rule(target=reserved, task_id=task_ids, detached=detach)
    def reserve_under_newest_pending(self, task_id: str | None, detached: bool) -> object:
        """Reserves a task under the newest pending task of the main session, so that trees of queued tasks
        grow deep."""
        pending = self.model.main.pending()
        parent_id = pending[-1].task_id if pending else None
        return self._start("main", task_id, parent_id, detached, reserve=True)

    @rule(target=runs, aim=st.sampled_from([*MAIN_IDS, *EXTERNAL_IDS, UNKNOWN_ID]) | runs | reserved)
    def claim(self, aim: str | Started | Run) -> object:
        """Claims by id: one of the ids in use, or the id of a run reserved or started before (generated ids
        too), which may now name a newer run or none."""
        if isinstance(aim, str):
            return self._claim("external" if aim in EXTERNAL_IDS else "main", aim)
        run = aim.run if isinstance(aim, Started) else aim
        return self._claim(run.session.name, run.task_id)

    @rule(target=runs)
    def claim_oldest_queued(self) -> object:
        """A runner claims the oldest queued task of the main session."""
        queued = [run for run in self.model.main.pending() if run.status == QUEUED]
        if not queued:
            return multiple()
        return self._claim("main", queued[0].task_id)

    def _claim(self, session_name: str, task_id: str) -> object:
        model_session = self._model_session(session_name)
        expected = self.model.claim_error(model_session, task_id)
        try:
            handle = self.sessions[session_name].claim_subagent_task(task_id)
        except (DuplicateTaskError, UnknownTaskError) as error:
            event(f"claim: raised {type(error).__name__}")
            assert type(error) is expected, (
                f"claim raised {error!r}; the model expected {expected or 'success'}"
            )
            return multiple()
        assert expected is None, f"claim succeeded; the model expected {expected}"
        assert handle.task_id == task_id
        run = model_session.retained[task_id]
        event(f"claim: of a {run.status} reservation")
        queued = run.status == QUEUED
        self.model.claim(run)
        self.handles[run] = handle
        started = Started(run, handle)
        self.started.append(started)
        # A cancelled reservation is finished, so whether it was still retained to be claimed may depend on
        # which of the queued runs one cancel finished is evicted first, an order the build does not keep
        # from one replay to the next. The bundles must grow the same way on every replay of the same steps
        # (hypothesis checks it), so only a claimed queued run (never evicted) goes into ``runs``; the
        # machine keeps the other's handle all the same, and ``end`` reaches it through ``reserved``.
        return started if queued else multiple()

    @rule(target=combined, sources=st.lists(runs | combined, min_size=1, max_size=3).map(tuple))
    def make_any(self, sources: tuple[Started | Combined, ...]) -> Combined:
        token = CancellationToken.any(*(source.token for source in sources))
        model, reasons_now = self.model.new_any([source.model_token for source in sources])
        self._settle_any(token, model, reasons_now)
        kept = Combined(token, model, len(self.kept_anys))
        self.kept_anys.append(kept)
        return kept

    @rule(run=runs | reserved, how=ends, value=st.integers(0, 2))
    def end(self, run: Started | Run, how: str, value: int) -> None:
        """The runner of any run started or claimed before reports its end (again, perhaps); for a reservation
        never claimed, the end is recorded by its id."""
        self._end(run.run if isinstance(run, Started) else run, how, value)

    @rule(task_id=st.sampled_from(MAIN_IDS), how=ends, value=st.integers(0, 2))
    def end_by_id(self, task_id: str, how: str, value: int) -> None:
        """The runner of the latest run of ``task_id`` reports its end (recorded by id if it has none)."""
        runs = [run for run in self.model.runs if run.session is self.model.main]
        latest = [run for run in runs if run.task_id == task_id][-1:]
        for run in latest:
            self._end(run, how, value)

    @rule(how=ends, value=st.integers(0, 2))
    def end_a_parent(self, how: str, value: int) -> None:
        """The newest unfinished task with pending children ends before they do: its runner reports, or for
        an unclaimed reservation its end is recorded by id."""
        parents = [
            run
            for run in self.model.runs
            if not run.finished and any(child.status in PENDING for child in run.children)
        ]
        for run in parents[-1:]:
            self._end(run, how, value)

    def _end(self, run: Run, how: str, value: int) -> None:
        """Ends ``run`` by its handle; a reservation never claimed has none, so its end is recorded by id, and
        reaches whatever run the id names now."""
        handle = self.handles.get(run)
        if handle is not None:
            target: Run | None = run
            if how == "complete":
                ended = handle.complete(value)
            elif how == "fail":
                ended = handle.fail(f"error {value}")
            else:
                ended = handle.fail(ValueError(f"error {value}"))
        else:
            target = run.session.retained.get(run.task_id)
            session = self.sessions[run.session.name]
            if how == "complete":
                ended = session.end_subagent_task(run.task_id, result=value)
            elif how == "fail":
                ended = session.end_subagent_task(run.task_id, error=f"error {value}")
            else:
                ended = session.end_subagent_task(run.task_id, error=ValueError(f"error {value}"))
            event(f"end: by id, {'of a ' + target.status if target is not None else 'not retained'}")
        self._ended(target, how, value, ended)
        self._retain()

    def _ended(self, target: Run | None, how: str, value: int, ended: bool) -> None:
        """Checks an end's answer against the model's, for the run it reached (None: none), and applies the
        rules of task groups that it starts."""
        if target is None:
            expected = False
        elif how == "complete":
            expected = self.model.end(target, COMPLETED, value, None)
        elif how == "fail":
            expected = self.model.end(target, FAILED, None, f"error {value}")
        else:
            expected = self.model.end(target, FAILED, None, f"ValueError: error {value}")
        assert ended is expected
        if expected and target is not None:
            self._settle_group(target)

    @rule(
        aims=st.lists(runs | reserved, min_size=1, max_size=4),
        how=ends,
        value=st.integers(0, 2),
    )
    def end_batch(self, aims: list[Started | Run], how: str, value: int) -> None:
        """A batch of ends in one call (§22): runs of one session, each named once, by its handle, or by its
        id for a reservation never claimed; each end as its own would be, in order, with its own answer."""
        chosen: list[Run] = []
        for aim in aims:
            run = aim.run if isinstance(aim, Started) else aim
            same_session = not chosen or run.session is chosen[0].session
            if same_session and all(other.task_id != run.task_id for other in chosen):
                chosen.append(run)
        batch: list[dict[str, object]] = []
        targets: list[Run | None] = []
        for run in chosen:
            handle = self.handles.get(run)
            end: dict[str, object] = {"handle": handle} if handle is not None else {"task_id": run.task_id}
            if how == "complete":
                end["result"] = value
            elif how == "fail":
                end["error"] = f"error {value}"
            else:
                end["error"] = ValueError(f"error {value}")
            batch.append(end)
            targets.append(run if handle is not None else run.session.retained.get(run.task_id))
        event(f"end: a batch of {len(batch)}")
        moved = self.sessions[chosen[0].session.name].end_subagent_tasks(batch)
        assert len(moved) == len(batch)
        for target, ended in zip(targets, moved, strict=True):
            self._ended(target, how, value, ended)
        self._retain()

    def _settle_group(self, run: Run) -> None:
        """The rules of task groups (§3) after ``run`` completed or failed: a group's end cancels its pending
        descendants; then a failure of an attached child cancels the group it started under, if still
        pending. A failing group that is itself a child of a group ends its own children first, so they
        show the group's end, not its parent's cancel."""
        if run.structured and run.status in (COMPLETED, FAILED):
            pending = [below for below in run.in_reach() if below.status in PENDING]
            if pending:
                event("group: its end cancelled pending children")
            self._observe(self.model.cancel(pending, GROUP_ENDED_REASON, "parent", origin=run.task_id))
        parent = run.parent
        if run.status == FAILED and not run.detached and parent is not None and parent.structured:
            if parent.status in PENDING:
                event("group: a failing child cancelled its group")
            if run.structured:
                event("group: a failing group cancelled the group above it")
            self._observe(
                self.model.cancel([parent], CHILD_FAILED_REASON, "child_failed", origin=run.task_id)
            )
        # The stores apply these rules before they record the run's own end, and a link these cancels fire
        # acts after it: the run and the queued runs these rules finished finish together, in an order the
        # model leaves open.
        finished = run.session.finished
        ended_with = next(index for index, group in enumerate(finished) if run in group)
        together = [finished_run for group in finished[ended_with:] for finished_run in group]
        del finished[ended_with:]
        finished.append(together)

    @rule(started=runs, reason=st.sampled_from([None, "approval"]))
    def pause(self, started: Started, reason: str | None) -> None:
        """The runner of a run started or claimed before pauses it (§5): only a running run pauses."""
        run = started.run
        expected = run.status == RUNNING and not run.finished
        event(f"pause: of a {run.status} run" + (", finished" if run.finished else ""))
        assert started.handle.pause(reason) is expected
        if expected:
            run.status, run.pause_reason = PAUSED, reason

    @rule(aim=st.sampled_from([*MAIN_IDS, UNKNOWN_ID]) | runs, value=st.integers(0, 2))
    def resume(self, aim: str | Started, value: int) -> None:
        """The session resumes by id (§5): only a paused run resumes, and its runner is handed ``value``."""
        task_id = aim.run.task_id if isinstance(aim, Started) else aim
        session_name = aim.run.session.name if isinstance(aim, Started) else "main"
        run = self._model_session(session_name).retained.get(task_id)
        expected = run is not None and run.status == PAUSED
        assert self.sessions[session_name].resume_subagent_task(task_id, value) is expected
        if run is not None and expected:
            event("resume: of a paused run")
            run.status, run.pause_reason = RUNNING, None
            handle = self.handles.get(run)
            if handle is not None:
                self._settled(lambda: self._check_resumed(handle, value))

    @staticmethod
    def _check_resumed(handle: TaskHandleProtocol, value: int) -> None:
        """The runner is handed the value (on Redis, once the resume has reached its process)."""
        try:
            resumed = handle.wait_resumed(timeout=0)
        except TimeoutError:
            raise AssertionError("the resume has not reached the runner") from None
        # A cancel would raise instead; none comes between the resume and this check.
        assert resumed == value

    @rule(
        aim=st.sampled_from([*MAIN_IDS, *EXTERNAL_IDS, UNKNOWN_ID]) | runs | reserved,
        reason=reasons,
    )
    def cancel(self, aim: str | Started | Run, reason: str | None) -> None:
        """Cancels by id: one of the ids in use, or the id of a run started or reserved before (generated ids
        too), which may now name a newer run or none."""
        if isinstance(aim, str):
            self._cancel_by_id("external" if aim in EXTERNAL_IDS else "main", aim, reason)
        else:
            run = aim.run if isinstance(aim, Started) else aim
            self._cancel_by_id(run.session.name, run.task_id, reason)

    def _cancel_by_id(self, session_name: str, task_id: str, reason: str | None) -> None:
        run = self._model_session(session_name).retained.get(task_id)
        cascade = self.model.cancel([] if run is None else [run], reason or DEFAULT_REASON, "requested")
        moved = self.sessions[session_name].cancel_subagent_task(task_id, reason)
        assert moved is (run is not None and run in cascade.moved)
        self._observe(cascade)
        self._retain()

    @rule(reason=reasons)
    def cancel_subtree(self, reason: str | None) -> None:
        """Stops a whole subtree by the id of its top: the oldest pending task with pending descendants."""
        tops = [
            run
            for run in self.model.main.pending()
            if any(below.status in PENDING for below in run.in_reach())
        ]
        if tops:
            self._cancel_by_id("main", tops[0].task_id, reason)

    # Session-wide cancels and close end most of what an example built: they wait until it has built some.
    @precondition(lambda self: len(self.model.runs) >= 6)
    @rule(session_name=session_names, reason=reasons)
    def cancel_session(self, session_name: str, reason: str | None) -> None:
        pending = self._model_session(session_name).pending()
        cascade = self.model.cancel(pending, reason or DEFAULT_REASON, "session")
        assert self.sessions[session_name].cancel(reason) == len(pending)
        self._observe(cascade)
        self._retain()

    @precondition(lambda self: len(self.model.runs) >= 10)
    @rule(session_name=session_names, reason=reasons)
    def close(self, session_name: str, reason: str | None) -> None:
        model_session = self._model_session(session_name)
        pending = model_session.pending()
        cascade = self.model.cancel(pending, reason or DEFAULT_REASON, "session")
        model_session.closed = True
        assert self.sessions[session_name].close(reason) == len(pending)
        self._observe(cascade)
        self._retain()

    @rule(aim=st.sampled_from([*MAIN_IDS, *EXTERNAL_IDS]), reason=reasons)
    def cancel_before_start(self, aim: str, reason: str | None) -> None:
        """A cancel with ``before_start``: a pending task is cancelled now; otherwise its next start begins
        cancelled."""
        session_name = "external" if aim in EXTERNAL_IDS else "main"
        model_session = self._model_session(session_name)
        run = model_session.retained.get(aim)
        if run is not None and run.status in PENDING:
            cascade = self.model.cancel([run], reason or DEFAULT_REASON, "requested")
            moved = self.sessions[session_name].cancel_subagent_task(aim, reason, before_start=True)
            assert moved is (run in cascade.moved)
            self._observe(cascade)
            self._retain()
        else:
            assert self.sessions[session_name].cancel_subagent_task(aim, reason, before_start=True) is False
            model_session.early[aim] = reason or DEFAULT_REASON
            event("cancel: recorded before the start")

    # Cancelling every pending task ends most of what an example built: it waits, as a session cancel does.
    @precondition(lambda self: len(self.model.runs) >= 6)
    @rule(status=st.sampled_from([None, QUEUED, RUNNING, COMPLETED]), reason=reasons)
    def cancel_by_status(self, status: str | None, reason: str | None) -> None:
        """A cancel by filter (§3): the main session's pending tasks in ``status`` (every pending task for
        ``None``; none for a status that is not pending), reported in start order."""
        targets = [run for run in self.model.main.pending() if status is None or run.status == status]
        cascade = self.model.cancel(targets, reason or DEFAULT_REASON, "requested")
        reported = self.sessions["main"].cancel_subagent_tasks(status=status, reason=reason)
        assert reported == [run.task_id for run in targets if run in cascade.moved]
        if len(targets) > 1:
            event("cancel by filter: many matched")
        self._observe(cascade)
        self._retain()

    @precondition(lambda self: len(self.model.runs) >= 4)
    @rule(session_name=session_names)
    def forget_finished(self, session_name: str) -> None:
        """Forgets every finished task (§7: each ended at least 0 s ago); the pending ones stay."""
        model_session = self._model_session(session_name)
        finished = [run for group in model_session.finished for run in group]
        assert self.sessions[session_name].forget_finished(0) == len(finished), session_name
        for run in finished:
            assert model_session.retained.pop(run.task_id) is run
        model_session.finished = []
        if finished:
            event("forget: finished runs forgotten")

    @invariant()
    def everything_matches_the_model(self) -> None:
        if self.sessions:
            self._settled(self._compare_with_the_model)

    def _compare_with_the_model(self) -> None:
        for name, session in self.sessions.items():
            model_session = self._model_session(name)
            assert session.is_closed() is model_session.closed
            listed = session.subagent_tasks()
            expected = model_session.listed()
            assert [task.task_id for task in listed] == [run.task_id for run in expected], name
            for snapshot, run in zip(listed, expected, strict=True):
                _check_snapshot(snapshot, run)
            pending = session.pending_subagent_tasks()
            expected = model_session.pending()
            assert [task.task_id for task in pending] == [run.task_id for run in expected], name
            for snapshot, run in zip(pending, expected, strict=True):
                _check_snapshot(snapshot, run)
            for task_id in [*MAIN_IDS, *EXTERNAL_IDS, UNKNOWN_ID]:
                queried = session.subagent_task(task_id)
                retained = model_session.retained.get(task_id)
                if retained is None:
                    assert queried is None, f"{name}:{task_id} should not be retained"
                else:
                    assert queried is not None, f"{retained!r} should be retained"
                    _check_snapshot(queried, retained)
        for started in self.started:
            self._check_handle(started)
            token = started.handle.token
            assert token.is_cancelled is (started.run.status == CANCELLED), repr(started.run)
            assert token.reason == started.run.cancel_reason, repr(started.run)
        for kept in self.kept_anys:
            assert kept.token.is_cancelled is kept.model_token.any_fired, repr(kept)
            assert kept.token.reason == kept.model_token.any_reason, repr(kept)


# About 12 s on an idle 2-core machine; the rarest situations (two links open to order, a start cancelled
# three ways, an end by id of a running task) come up in about one example in two hundred.
IN_MEMORY = settings(
    max_examples=600,
    stateful_step_count=50,
    deadline=None,
    database=None,
    print_blob=True,
)
# Every step is a few round trips to Redis, and every comparison a few dozen: about 7 s each on one server
# and on a cluster. (1,500 examples on one server, run once by hand, found nothing more.)
ON_REDIS = settings(IN_MEMORY, max_examples=40)


def _on(store: Store) -> type[ContractMachine]:
    class OnStore(ContractMachine):
        def __init__(self) -> None:
            super().__init__(store)

    return OnStore


def test_the_in_memory_store_keeps_the_contract() -> None:
    run_state_machine_as_test(_on(MemoryStore()), settings=IN_MEMORY)


def test_the_redis_store_keeps_the_contract(module_redis_server: RedisServer) -> None:
    run_state_machine_as_test(_on(RedisStore(module_redis_server.url)), settings=ON_REDIS)


def test_a_redis_cluster_keeps_the_contract(redis_cluster: RedisCluster) -> None:
    run_state_machine_as_test(_on(RedisStore(redis_cluster.url)), settings=ON_REDIS)
