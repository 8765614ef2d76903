"""Type stubs for the native half of subagent_tracker (built from crates/subagent-tracker-py)."""

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine, Generator, Iterable, Mapping
from typing import Any, Final, Generic, Literal, TypeVar, final

from typing_extensions import disjoint_base

from subagent_tracker import _session
from subagent_tracker._checkpoints import GuardedStream
from subagent_tracker._progress import ProgressEntry
from subagent_tracker._status import SubagentStatus

__all__ = [
    "BATCH_REFUSED_REASON",
    "CHILD_FAILED_REASON",
    "CLAIM_TIMEOUT_ERROR",
    "DEADLINE_REASON",
    "DEFAULT_CANCEL_REASON",
    "DEFAULT_EVENT_BUFFER",
    "DEFAULT_MAX_FINISHED_TASKS",
    "DROPPED_HANDLE_ERROR",
    "GROUP_ENDED_REASON",
    "LEASE_LOST_REASON",
    "MAX_SECONDS",
    "MAX_TASK_ID_BYTES",
    "ORPHANED_RUN_ERROR",
    "RESTORED_WITHOUT_RUNNER_ERROR",
    "SESSION_LOST_REASON",
    "WORKER_LOST_ERROR",
    "_EVENT_STREAM_BUSY",
    "_PENDING_STATUSES",
    "AsyncRedisRegistry",
    "AsyncRedisSession",
    "AsyncRedisTaskHandle",
    "CancelCallbackRegistration",
    "CancelHandlers",
    "CancellationToken",
    "EventSubscription",
    "HandlerCompletion",
    "Ready",
    "RedisEventReader",
    "RedisRegistry",
    "RedisSession",
    "RedisTaskHandle",
    "Registry",
    "Session",
    "SubagentEvent",
    "SubagentTask",
    "SubagentTaskHandle",
    "TaskWatch",
    "_SessionState",
    "__version__",
    "_after_fork_in_child",
    "_after_fork_in_parent",
    "_before_fork",
    "_cancel_wait_timeout",
    "_check_seconds",
    "_interpreter_exiting",
    "_quoted",
    "pending_deadlines",
]

def pending_deadlines() -> int: ...
def _interpreter_exiting() -> None: ...
def _before_fork() -> None: ...
def _after_fork_in_parent() -> None: ...
def _after_fork_in_child() -> None: ...
def _check_seconds(value: float | None, name: str) -> None: ...
def _quoted(text: str) -> str: ...
def _cancel_wait_timeout(
    task_id: str, timeout: float, runner_running: bool, handlers_at_work: list[str]
) -> str | None: ...

@final
class CancelCallbackRegistration:
    """A registered cancel callback."""

    def remove(self) -> bool: ...

_T = TypeVar("_T")

__version__: Final[str]
MAX_TASK_ID_BYTES: Final[int]
MAX_SECONDS: Final[float]
DEFAULT_MAX_FINISHED_TASKS: Final[int]
DEFAULT_EVENT_BUFFER: Final[int]
DEFAULT_CANCEL_REASON: Final[str]
BATCH_REFUSED_REASON: Final[str]
DEADLINE_REASON: Final[str]
CHILD_FAILED_REASON: Final[str]
GROUP_ENDED_REASON: Final[str]
CLAIM_TIMEOUT_ERROR: Final[str]
RESTORED_WITHOUT_RUNNER_ERROR: Final[str]
_EVENT_STREAM_BUSY: Final[str]
WORKER_LOST_ERROR: Final[str]
LEASE_LOST_REASON: Final[str]
ORPHANED_RUN_ERROR: Final[str]
SESSION_LOST_REASON: Final[str]
DROPPED_HANDLE_ERROR: Final[str]
_PENDING_STATUSES: Final[tuple[str, ...]]

@final
class Ready(Generic[_T]):
    """An awaitable that is already done."""

    def __await__(self) -> Generator[Any, None, _T]: ...
    def __iter__(self) -> Ready[_T]: ...
    def __next__(self) -> Any: ...

@final
class SubagentTask:
    """An immutable snapshot of one subagent task, taken atomically."""

    @property
    def task_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def parent_id(self) -> str | None: ...
    @property
    def agent(self) -> str | None: ...
    @property
    def description(self) -> str | None: ...
    @property
    def metadata(self) -> Mapping[str, Any] | None: ...
    @property
    def status(self) -> SubagentStatus: ...
    @property
    def finished(self) -> bool: ...
    @property
    def started_at(self) -> float: ...
    @property
    def worker(self) -> str | None: ...
    @property
    def queued_at(self) -> float | None: ...
    @property
    def claimed_at(self) -> float | None: ...
    @property
    def cancelled_at(self) -> float | None: ...
    @property
    def ended_at(self) -> float | None: ...
    @property
    def cancel_reason(self) -> str | None: ...
    @property
    def cancel_origin(self) -> str | None: ...
    @property
    def cancel_cause(
        self,
    ) -> Literal["requested", "parent", "session", "deadline", "linked", "lease", "child_failed"] | None: ...
    @property
    def deadline(self) -> float | None: ...
    @property
    def detached(self) -> bool: ...
    @property
    def escalated(self) -> bool: ...
    @property
    def progress(self) -> str | None: ...
    @property
    def progress_count(self) -> int: ...
    @property
    def progress_log(self) -> list[ProgressEntry]: ...
    @property
    def result(self) -> Any: ...
    @property
    def error(self) -> str | None: ...
    @property
    def error_type(self) -> str | None: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def pause_reason(self) -> str | None: ...

@final
class CancellationToken:
    """Fires when its task becomes cancelled, and never after the task completed or failed."""

    @property
    def task_id(self) -> str | None: ...
    @property
    def is_cancelled(self) -> bool: ...
    @property
    def reason(self) -> str | None: ...
    def raise_if_cancelled(self) -> None: ...
    def cancelled(self) -> asyncio.Future[None]: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def on_cancel(self, callback: Callable[[], object]) -> CancelCallbackRegistration: ...
    @staticmethod
    def any(*tokens: CancellationToken) -> CancellationToken: ...
    @property
    def callback_count(self) -> int: ...
    def guard(self, stream: AsyncIterable[_T]) -> GuardedStream[_T]: ...
    def run(self, awaitable: Awaitable[_T]) -> Awaitable[_T]: ...

@final
class SubagentTaskHandle:
    """Held by the code that runs a task; closing it while the task runs fails the task."""

    @property
    def task_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def token(self) -> CancellationToken: ...
    def progress(self, message: str, *, data: Any = None) -> bool: ...
    def complete(self, result: Any = None) -> bool: ...
    def fail(
        self,
        error: str | BaseException,
        *,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> bool: ...
    def pause(self, reason: str | None = None) -> bool: ...
    def resumed(self) -> Coroutine[Any, Any, Any]: ...
    def wait_resumed(self, timeout: float | None = None) -> Any: ...
    def _resume_future(self) -> asyncio.Future[None] | None: ...
    def _wait_for_resume(self, timeout: float | None) -> bool: ...
    def _resumption(self) -> tuple[Literal["paused", "resumed", "cancelled", "ended"], Any]: ...
    def record_escalation(self) -> None: ...
    def snapshot(self) -> SubagentTask: ...
    def __enter__(self) -> SubagentTaskHandle: ...
    def __exit__(self, _exception_type: object, exception: object, _traceback: object) -> bool: ...
    def __aenter__(self) -> Ready[SubagentTaskHandle]: ...
    def __aexit__(self, _exception_type: object, exception: object, _traceback: object) -> Ready[bool]: ...

@final
class SubagentEvent:
    """One lifecycle event."""

    @property
    def task_id(self) -> str | None: ...
    @property
    def kind(
        self,
    ) -> Literal["started", "claimed", "progress", "cancelled", "ended", "paused", "resumed", "lagged"]: ...
    @property
    def status(self) -> SubagentStatus | None: ...
    @property
    def timestamp(self) -> float: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def missed(self) -> int: ...

@final
class EventSubscription:
    """A live subscription to a session's events."""

    def try_next(self) -> SubagentEvent | None: ...
    def readable(self) -> asyncio.Future[None] | None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

@final
class CancelHandlers:
    """The cancel handlers of a cancelled subtree, for ``cancel_subagent_task_and_wait`` to wait for."""

    def future(self) -> asyncio.Future[None] | None: ...
    def at_work(self) -> list[str]: ...

@final
class HandlerCompletion:
    """The mark of an async cancel handler's work, finished when its coroutine ends."""

    def finish(self) -> None: ...

@final
class TaskWatch:
    """Follows one run of a task until it finishes."""

    def finished_future(self) -> asyncio.Future[None] | None: ...
    def snapshot(self) -> SubagentTask: ...

@disjoint_base
class Session:
    """A scope that owns subagent tasks (the native half of ``subagent_tracker.Session``)."""

    def __new__(
        cls,
        session_id: str | None = None,
        *,
        max_finished_tasks: int | None = 10_000,
        event_buffer: int | None = 4096,
        max_finished_age: float | None = None,
        early_cancel_ttl: float | None = 60,
        progress_log_size: int | None = 16,
    ) -> Session: ...
    @property
    def session_id(self) -> str: ...
    @property
    def max_finished_tasks(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def start_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> SubagentTaskHandle: ...
    def reserve_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
        claim_timeout: float | None = None,
    ) -> str: ...
    def start_subagent_tasks(self, tasks: Iterable[Mapping[str, Any]]) -> list[SubagentTaskHandle]: ...
    def reserve_subagent_tasks(
        self, tasks: Iterable[Mapping[str, Any]], *, claim_timeout: float | None = None
    ) -> list[str]: ...
    def claim_subagent_task(self, task_id: str) -> SubagentTaskHandle: ...
    def cancel_subagent_task(
        self, task_id: str, reason: str | None = None, *, before_start: bool = False
    ) -> bool: ...
    def restore_snapshots(self, snapshots: Iterable[Mapping[str, Any]]) -> int: ...
    def record_event(self, event: Mapping[str, Any]) -> bool: ...
    def resume_subagent_task(self, task_id: str, value: Any = None) -> bool: ...
    def end_subagent_task(
        self,
        task_id: str,
        *,
        result: Any = None,
        error: str | BaseException | None = None,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> bool: ...
    def end_subagent_tasks(self, ends: Iterable[Mapping[str, Any]]) -> list[bool]: ...
    def cancel_subagent_tasks(
        self,
        *,
        agent: str | None = None,
        status: SubagentStatus | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        reason: str | None = None,
    ) -> list[str]: ...
    def cancel(self, reason: str | None = None) -> int: ...
    def close(self, reason: str | None = None) -> int: ...
    def token(self, task_id: str) -> CancellationToken: ...
    def subagent_task(self, task_id: str) -> SubagentTask | None: ...
    def subagent_tasks(self) -> list[SubagentTask]: ...
    def subagent_tasks_page(
        self, cursor: str | None = None, *, limit: int | None = None, pending: bool = False
    ) -> tuple[list[SubagentTask], str | None]: ...
    def forget_finished(self, older_than: float) -> int: ...
    def pending_subagent_tasks(self) -> list[SubagentTask]: ...
    def _watch(self, task_id: str) -> TaskWatch: ...
    def _cancel_and_watch(
        self, task_id: str, reason: str | None
    ) -> tuple[bool, TaskWatch, CancelHandlers]: ...
    def _subscribe(self) -> EventSubscription: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class _SessionState:
    """A session's shared state, handed by a registry to the ``Session`` it builds."""

@final
class Registry:
    """The live sessions of this process, by id."""

    def __new__(cls) -> Registry: ...
    def session(
        self,
        session_id: str | None = None,
        *,
        max_finished_tasks: int | None = None,
        event_buffer: int | None = None,
        max_finished_age: float | None = None,
        early_cancel_ttl: float | None = None,
        progress_log_size: int | None = None,
    ) -> _session.Session: ...
    def get_session(self, session_id: str) -> _session.Session | None: ...
    def sessions(self) -> list[str]: ...

@final
class RedisRegistry:
    """Sessions kept in Redis, shared by every process connected to it; this process is one worker.

    Raises ``ValueError`` for what retrying cannot fix (a lease shorter than 3 ms, a reconcile interval or
    timeout shorter than 1 ms, a URL that is not Redis's, a database the server lacks, a password it wants or
    refuses, a user it does not let run the functions, a server before Redis 7.0 or one that speaks another
    protocol, a TLS certificate that does not verify, a key prefix used by other data, another build of the
    server functions) and ``RegistryUnavailableError`` when the server cannot be reached within ``timeout``.
    ``cluster``: whether the URL names a node of a Redis Cluster (``None``: ask the node).
    ``wait_for_replicas``: how many replicas must have a cancel before it returns (``ReplicationTimeoutError``
    when they do not confirm it in time). A server whose ``maxmemory-policy`` evicts any key (``allkeys-*``)
    is refused with a ``ValueError`` unless ``allow_eviction=True``: then a session whose keys were evicted
    raises ``SessionLostError``, and its runners' tokens fire with ``SESSION_LOST_REASON``. Later calls raise
    ``RegistryUnavailableError`` for what a retry may cure and ``RegistryProtocolError`` for an answer the
    store does not expect."""

    def __new__(
        cls,
        url: str,
        *,
        worker_id: str | None = None,
        lease: float | None = None,
        reconcile_interval: float | None = None,
        timeout: float | None = None,
        session_ttl: float | None = None,
        key_prefix: str | None = None,
        cluster: bool | None = None,
        wait_for_replicas: int | None = None,
        allow_eviction: bool | None = None,
    ) -> RedisRegistry: ...
    @property
    def worker_id(self) -> str: ...
    def session(
        self,
        session_id: str | None = None,
        *,
        max_finished_tasks: int | None = None,
        event_buffer: int | None = None,
        max_finished_age: float | None = None,
        early_cancel_ttl: float | None = None,
        progress_log_size: int | None = None,
    ) -> RedisSession: ...
    def get_session(self, session_id: str) -> RedisSession | None: ...
    def sessions(self) -> list[str]: ...

@final
class RedisSession:
    """A session kept in Redis, seen from this process: one incarnation of its id. Once that incarnation
    has ended (closed and drained with its id opened again, swept after ``session_ttl``, or lost with a
    server that restarted empty), its transitions, and its queries once its keys are gone, raise
    ``SessionClosedError``. Metadata and results cross processes as JSON: mappings with ``str`` keys,
    lists, tuples, ``str``, ``int``, ``float``, ``bool`` or ``None``, nested at most 64 deep."""

    @property
    def session_id(self) -> str: ...
    @property
    def max_finished_tasks(self) -> int: ...
    def is_closed(self) -> bool: ...
    def start_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> RedisTaskHandle: ...
    def reserve_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
        claim_timeout: float | None = None,
    ) -> str: ...
    def start_subagent_tasks(self, tasks: Iterable[Mapping[str, Any]]) -> list[RedisTaskHandle]: ...
    def reserve_subagent_tasks(
        self, tasks: Iterable[Mapping[str, Any]], *, claim_timeout: float | None = None
    ) -> list[str]: ...
    def claim_subagent_task(self, task_id: str) -> RedisTaskHandle: ...
    def cancel_subagent_task(
        self, task_id: str, reason: str | None = None, *, before_start: bool = False
    ) -> bool: ...
    def restore_snapshots(self, snapshots: Iterable[Mapping[str, Any]]) -> int: ...
    def export_snapshots(self) -> list[dict[str, Any]]: ...
    def record_event(self, event: Mapping[str, Any]) -> bool: ...
    def resume_subagent_task(self, task_id: str, value: Any = None) -> bool: ...
    def end_subagent_task(
        self,
        task_id: str,
        *,
        result: Any = None,
        error: str | BaseException | None = None,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> bool: ...
    def end_subagent_tasks(self, ends: Iterable[Mapping[str, Any]]) -> list[bool]: ...
    def cancel_subagent_tasks(
        self,
        *,
        agent: str | None = None,
        status: SubagentStatus | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        reason: str | None = None,
    ) -> list[str]: ...
    def cancel(self, reason: str | None = None) -> int: ...
    def close(self, reason: str | None = None) -> int: ...
    def token(self, task_id: str) -> CancellationToken: ...
    def subagent_task(self, task_id: str) -> SubagentTask | None: ...
    def subagent_tasks(self) -> list[SubagentTask]: ...
    def subagent_tasks_page(
        self, cursor: str | None = None, *, limit: int | None = None, pending: bool = False
    ) -> tuple[list[SubagentTask], str | None]: ...
    def forget_finished(self, older_than: float) -> int: ...
    def pending_subagent_tasks(self) -> list[SubagentTask]: ...
    def wait_subagent_task(
        self, task_id: str, timeout: float | None = None
    ) -> asyncio.Future[SubagentTask]: ...
    def cancel_subagent_task_and_wait(
        self, task_id: str, reason: str | None = None, *, timeout: float | None = None
    ) -> asyncio.Future[SubagentTask]: ...
    def spawn_subagent_task(
        self,
        function: Callable[[RedisTaskHandle], Awaitable[Any]],
        task_id: str | None = None,
        *,
        grace: float = ...,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> _session.SpawnedSubagent: ...
    def events(self) -> _session.EventStream: ...
    def __enter__(self) -> RedisSession: ...
    def __exit__(self, _exception_type: object, _exception: object, _traceback: object) -> bool: ...

@final
class RedisEventReader:
    """A Redis session's events, read on demand, for ``subagent_tracker.EventStream``."""

    def try_next(self) -> SubagentEvent | None: ...
    def readable(self) -> asyncio.Future[None] | None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

@final
class RedisTaskHandle:
    """The runner's side of a task kept in Redis; its token fires here when any process cancels the task."""

    @property
    def task_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def token(self) -> CancellationToken: ...
    def progress(self, message: str, *, data: Any = None) -> bool: ...
    def complete(self, result: Any = None) -> bool: ...
    def fail(
        self,
        error: str | BaseException,
        *,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> bool: ...
    def pause(self, reason: str | None = None) -> bool: ...
    def resumed(self) -> Coroutine[Any, Any, Any]: ...
    def wait_resumed(self, timeout: float | None = None) -> Any: ...
    def _resume_future(self) -> asyncio.Future[None] | None: ...
    def _wait_for_resume(self, timeout: float | None) -> bool: ...
    def _resumption(self) -> tuple[Literal["paused", "resumed", "cancelled", "ended"], Any]: ...
    def record_escalation(self) -> None: ...
    def snapshot(self) -> SubagentTask | None: ...
    def __enter__(self) -> RedisTaskHandle: ...
    def __exit__(self, _exception_type: object, exception: object, _traceback: object) -> bool: ...
    def __aenter__(self) -> Ready[RedisTaskHandle]: ...
    def __aexit__(self, _exception_type: object, exception: object, _traceback: object) -> Ready[bool]: ...

@final
class AsyncRedisRegistry:
    """Sessions kept in Redis, for asyncio programs: ``registry = await AsyncRedisRegistry.connect(url)``.

    The asyncio twin of ``RedisRegistry``, as ``redis.asyncio`` is redis-py's: every call that touches the
    network returns an awaitable at once and never blocks the event loop, with the blocking twin's semantics
    and errors. Cancelling the awaiting coroutine abandons the wait, never the call: a transition always
    completes, and a start or claim nobody received ends as a dropped handle does."""

    def __new__(cls, *_args: object, **_kwargs: object) -> AsyncRedisRegistry: ...
    @staticmethod
    def connect(
        url: str,
        *,
        worker_id: str | None = None,
        lease: float | None = None,
        reconcile_interval: float | None = None,
        timeout: float | None = None,
        session_ttl: float | None = None,
        key_prefix: str | None = None,
        cluster: bool | None = None,
        wait_for_replicas: int | None = None,
        allow_eviction: bool | None = None,
    ) -> Coroutine[Any, Any, AsyncRedisRegistry]: ...
    @property
    def worker_id(self) -> str: ...
    def session(
        self,
        session_id: str | None = None,
        *,
        max_finished_tasks: int | None = None,
        event_buffer: int | None = None,
        max_finished_age: float | None = None,
        early_cancel_ttl: float | None = None,
        progress_log_size: int | None = None,
    ) -> asyncio.Future[AsyncRedisSession]: ...
    def get_session(self, session_id: str) -> asyncio.Future[AsyncRedisSession | None]: ...
    def sessions(self) -> asyncio.Future[list[str]]: ...

@final
class AsyncRedisSession:
    """A session kept in Redis, for asyncio programs: ``RedisSession`` with every call awaited."""

    @property
    def session_id(self) -> str: ...
    @property
    def max_finished_tasks(self) -> int: ...
    def is_closed(self) -> asyncio.Future[bool]: ...
    def start_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> asyncio.Future[AsyncRedisTaskHandle]: ...
    def reserve_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
        claim_timeout: float | None = None,
    ) -> asyncio.Future[str]: ...
    def start_subagent_tasks(
        self, tasks: Iterable[Mapping[str, Any]]
    ) -> asyncio.Future[list[AsyncRedisTaskHandle]]: ...
    def reserve_subagent_tasks(
        self, tasks: Iterable[Mapping[str, Any]], *, claim_timeout: float | None = None
    ) -> asyncio.Future[list[str]]: ...
    def claim_subagent_task(self, task_id: str) -> asyncio.Future[AsyncRedisTaskHandle]: ...
    def cancel_subagent_task(
        self, task_id: str, reason: str | None = None, *, before_start: bool = False
    ) -> asyncio.Future[bool]: ...
    def restore_snapshots(self, snapshots: Iterable[Mapping[str, Any]]) -> asyncio.Future[int]: ...
    def export_snapshots(self) -> Coroutine[Any, Any, list[dict[str, Any]]]: ...
    def record_event(self, event: Mapping[str, Any]) -> asyncio.Future[bool]: ...
    def resume_subagent_task(self, task_id: str, value: Any = None) -> asyncio.Future[bool]: ...
    def end_subagent_task(
        self,
        task_id: str,
        *,
        result: Any = None,
        error: str | BaseException | None = None,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> asyncio.Future[bool]: ...
    def end_subagent_tasks(self, ends: Iterable[Mapping[str, Any]]) -> asyncio.Future[list[bool]]: ...
    def cancel_subagent_tasks(
        self,
        *,
        agent: str | None = None,
        status: SubagentStatus | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        reason: str | None = None,
    ) -> asyncio.Future[list[str]]: ...
    def cancel(self, reason: str | None = None) -> asyncio.Future[int]: ...
    def close(self, reason: str | None = None) -> asyncio.Future[int]: ...
    def token(self, task_id: str) -> asyncio.Future[CancellationToken]: ...
    def subagent_task(self, task_id: str) -> asyncio.Future[SubagentTask | None]: ...
    def subagent_tasks(self) -> asyncio.Future[list[SubagentTask]]: ...
    def subagent_tasks_page(
        self, cursor: str | None = None, *, limit: int | None = None, pending: bool = False
    ) -> asyncio.Future[tuple[list[SubagentTask], str | None]]: ...
    def forget_finished(self, older_than: float) -> asyncio.Future[int]: ...
    def pending_subagent_tasks(self) -> asyncio.Future[list[SubagentTask]]: ...
    def wait_subagent_task(
        self, task_id: str, timeout: float | None = None
    ) -> asyncio.Future[SubagentTask]: ...
    def cancel_subagent_task_and_wait(
        self, task_id: str, reason: str | None = None, *, timeout: float | None = None
    ) -> asyncio.Future[SubagentTask]: ...
    def spawn_subagent_task(
        self,
        function: Callable[[AsyncRedisTaskHandle], Awaitable[Any]],
        task_id: str | None = None,
        *,
        grace: float = ...,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> Awaitable[_session.SpawnedSubagent]: ...
    def events(self) -> asyncio.Future[_session.EventStream]: ...
    def _blocking(self) -> RedisSession: ...

@final
class AsyncRedisTaskHandle:
    """The runner's side of a task kept in Redis, for asyncio programs: ``async with handle:`` ends the task
    from how the block exits, and each report is awaited."""

    @property
    def task_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def token(self) -> CancellationToken: ...
    def progress(self, message: str, *, data: Any = None) -> asyncio.Future[bool]: ...
    def complete(self, result: Any = None) -> asyncio.Future[bool]: ...
    def fail(
        self,
        error: str | BaseException,
        *,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> asyncio.Future[bool]: ...
    def pause(self, reason: str | None = None) -> asyncio.Future[bool]: ...
    def resumed(self) -> Coroutine[Any, Any, Any]: ...
    def wait_resumed(self, timeout: float | None = None) -> Any: ...
    def _resume_future(self) -> asyncio.Future[None] | None: ...
    def _wait_for_resume(self, timeout: float | None) -> bool: ...
    def _resumption(self) -> tuple[Literal["paused", "resumed", "cancelled", "ended"], Any]: ...
    def record_escalation(self) -> asyncio.Future[None]: ...
    def snapshot(self) -> asyncio.Future[SubagentTask | None]: ...
    def __aenter__(self) -> Ready[AsyncRedisTaskHandle]: ...
    def __aexit__(
        self, _exception_type: object, exception: object, _traceback: object
    ) -> asyncio.Future[bool]: ...
