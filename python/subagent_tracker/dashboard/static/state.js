/*
 * The dashboard's state: its constants, the elements it touches, the selected session's task model and the queue
 * of updates from the stream, applied within each frame's budget.
 */
import { scheduleFrame } from "./render.js";
import { filterActive } from "./tree_view.js";

export const ROW_HEIGHT = 28; // px, equal to --row-height in dashboard.css
export const OVERSCAN_ROWS = 8;
export const FRAME_BUDGET_MS = 8;
export const MIN_APPLY_MS = 2; // even after a costly render, keep draining the queue
export const COLLAPSE_ABOVE = 50; // children: a bigger subtree starts collapsed
export const INDENT_PX = 14;
export const MAX_INDENT_LEVELS = 12; // deeper rows stop moving right, so their ids stay readable
export const RECONNECT_MS = 1000;
export const FRAME_TIMES_KEPT = 2000;
export const TOKEN_KEY = "subagent-tracker-token";
export const CANCEL_REASON = "cancelled from the dashboard";
export const CHART_SECONDS = 300;
export const STATUSES = ["running", "queued", "paused", "completed", "failed", "cancelled"];
export const DETAIL_KEYS = ["metadata", "result", "error", "error_type", "error_code"];

// Read by browser tests and the benchmark; see the spec.
// readyAtMs: performance.now() (ms since the page's navigation began) when the first snapshot was shown.
export const hook = {
  ready: false, firstRenderMs: null, readyAtMs: null, frameTimes: [], taskCount: 0, renderedRows: 0,
};
window.subagentDashboard = hook;

export const camel = (name) => name.replace(/-(\w)/g, (_, letter) => letter.toUpperCase());

// The elements the script touches, by id: dom.filterStatus is #filter-status.
export const dom = {};
for (const id of [
  "connection", "connection-label", "message", "sessions", "sessions-empty", "chart", "session-title",
  "filter-status", "filter-agent", "filter-text", "tree-count", "cancel-session", "tree", "tree-sizer",
  "tree-empty", "details", "details-title", "details-body", "details-close", "confirm", "confirm-text",
  "confirm-yes", "confirm-no", "token-dialog", "token-input", "token-cancel",
]) {
  dom[camel(id)] = document.getElementById(id);
}

export const state = {
  sessions: [],
  selected: null, // session id
  goneSessions: new Set(), // never auto-selected again, so a stale listing cannot loop
  clockOffset: 0, // server clock minus local clock, in seconds
  selectedTaskId: null,
  expanded: new Map(), // task id -> bool: the user's toggles, which beat the default
  filters: { status: "", agent: "", text: "" },
  scrollTop: 0,
  viewportHeight: 0,
  loaded: false, // a snapshot of the selected session has been swapped in
  firstSnapshotAt: null, // performance.now() when the selected session's first snapshot arrived
  tokenDeclined: false, // the user dismissed the token dialog: do not ask again until a reload
  renderCostMs: 0, // flatten + render time of the last frame that did them
};

// The tasks shown, and the model a snapshot is built into: swapped in whole, so no half tree shows.
export const models = { shown: createModel(), staging: null };
// items: a snapshot being loaded, in order. updates: the latest version of each task changed since (or an
// eviction), keyed by id, so a backlog (a background tab gets no frames) holds each task once.
export const queue = { items: [], head: 0, updates: new Map() };
export const dirty = { structure: false, rows: false, agents: false, details: false };

// ---------------------------------------------------------------- small helpers

export function make(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Writing the same text again still costs a DOM mutation and a style pass.
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

export function setLabel(node, value) {
  const text = value == null ? "" : String(value);
  setText(node, text);
  if (node.title !== text) node.title = text;
}

export const enc = encodeURIComponent;
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const serverNow = () => Date.now() / 1000 + state.clockOffset;
// The server says which tasks are pending (the core's rule), so the page never repeats it.
export const isPending = (task) => task.pending === true;
export const hasDetails = (task) => DETAIL_KEYS.some((key) => key in task);
const isTask = (item) => item !== null && typeof item === "object" && typeof item.task_id === "string";
export const countText = (n, noun) => `${n.toLocaleString("en")} ${noun}`;
export const plural = (n, one, many) => countText(n, n === 1 ? one : many);
// First strong isolate ... pop directional isolate: user text inside a sentence keeps its own direction.
export const isolate = (text) => `\u2068${text}\u2069`;
export const query = (ids) => Object.entries(ids).map(([key, value]) => `${key}=${enc(value)}`).join("&");

export function syncClock(now) {
  if (typeof now === "number" && Number.isFinite(now)) state.clockOffset = now - Date.now() / 1000;
}

// A cancelled task that has not finished yet is still stopping.
export function statusOf(task) {
  return task.status === "cancelled" && !task.finished ? "cancelling" : String(task.status);
}

const pad2 = (n) => String(n).padStart(2, "0");

export function formatDuration(seconds) {
  const s = Math.max(0, seconds);
  if (s < 10) return `${(Math.floor(s * 10) / 10).toFixed(1)}s`;
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad2(Math.floor(s % 60))}s`;
  return `${Math.floor(s / 3600)}h ${pad2(Math.floor((s % 3600) / 60))}m`;
}

export function formatCountdown(seconds) {
  if (seconds <= 0) return "0s";
  return seconds < 60 ? `${Math.ceil(seconds)}s` : formatDuration(seconds);
}

// ---------------------------------------------------------------- the task model

export function createModel() {
  return {
    tasks: new Map(), // task id -> task as last sent
    children: new Map(), // parent id -> Set of child ids (an evicted parent's children are roots)
    pending: new Set(), // ids of queued or running tasks
    counts: new Map(), // status -> how many tasks have it: the selected session's counts in the sidebar
    agents: new Set(),
    pendingAncestors: null, // ids with a pending descendant; built lazily, dropped on any change
  };
}

/** Forgets a task the registry no longer retains; its children become roots. */
function removeTask(m, id) {
  const previous = m.tasks.get(id);
  if (!previous) return;
  m.tasks.delete(id);
  count(m, previous.status, -1);
  m.children.get(previous.parent_id ?? null)?.delete(id);
  m.pending.delete(id);
  m.pendingAncestors = null;
}

function count(m, status, delta) {
  const key = String(status);
  m.counts.set(key, (m.counts.get(key) || 0) + delta);
}

/**
 * Inserts or replaces a task in O(1); says whether the tree's shape changed (a pending task joins the
 * pending first among its siblings, so a change of pending moves it), and whether a new agent came.
 */
function upsertTask(m, task) {
  const id = task.task_id;
  const previous = m.tasks.get(id);
  const parent = task.parent_id ?? null;
  m.tasks.set(id, task);
  if (previous) count(m, previous.status, -1);
  count(m, task.status, 1);

  const structural = !previous || (previous.parent_id ?? null) !== parent;
  if (previous && structural) m.children.get(previous.parent_id)?.delete(id);
  if (structural && parent !== null) {
    if (!m.children.has(parent)) m.children.set(parent, new Set());
    m.children.get(parent).add(id);
  }

  const wasPending = m.pending.has(id);
  if (isPending(task)) m.pending.add(id);
  else m.pending.delete(id);
  const pendingChanged = wasPending !== isPending(task);
  if (structural || pendingChanged) m.pendingAncestors = null;

  const newAgent = typeof task.agent === "string" && task.agent !== "" && !m.agents.has(task.agent);
  if (newAgent) m.agents.add(task.agent);
  return { structural: structural || pendingChanged, newAgent };
}

/**
 * Whether a cancel of this task reaches more than the task itself. One walk up from each pending task,
 * stopping at ancestors already marked: O(tasks) at worst, once per change, and safe against a parent
 * cycle in bad data. (A cancel cascades through finished tasks too, so the walk does not stop at them.)
 */
export function hasPendingDescendant(id) {
  if (!models.shown.pendingAncestors) {
    const marked = new Set();
    for (const pendingId of models.shown.pending) {
      let parent = models.shown.tasks.get(pendingId).parent_id;
      while (parent != null && models.shown.tasks.has(parent) && !marked.has(parent)) {
        marked.add(parent);
        parent = models.shown.tasks.get(parent).parent_id;
      }
    }
    models.shown.pendingAncestors = marked;
  }
  return models.shown.pendingAncestors.has(id);
}

// ---------------------------------------------------------------- the update queue

// Markers around a snapshot's tasks in the queue; no parsed JSON can be identical to them.
const SNAPSHOT_START = Object.freeze({});
const SNAPSHOT_END = Object.freeze({});

export function enqueueSnapshot(tasks) {
  // A snapshot replaces the model, so whatever is still queued is superseded.
  queue.items = [SNAPSHOT_START, ...tasks.filter(isTask), SNAPSHOT_END];
  queue.head = 0;
  queue.updates.clear();
  models.staging = null;
  scheduleFrame();
}

export function enqueueTasks(tasks, removed) {
  for (const task of tasks) if (isTask(task)) queue.updates.set(task.task_id, task);
  for (const id of removed) if (typeof id === "string") queue.updates.set(id, { removed: id });
  scheduleFrame();
}

export const queueIsEmpty = () => queue.head >= queue.items.length && queue.updates.size === 0;

/**
 * Applies queued items until the deadline, or until a snapshot is swapped in (the frame's time then
 * goes to showing it); answers whether one was.
 */
export function applyQueued(deadline) {
  const items = queue.items;
  let committed = false;
  let i = queue.head;
  let n = 0;
  // Reading the clock for every task would cost more than the tasks.
  const overBudget = () => ++n % 32 === 0 && performance.now() > deadline;
  while (i < items.length && !committed && !overBudget()) committed = applyItem(items[i++]);
  queue.head = i;
  if (i >= items.length) {
    queue.items = [];
    queue.head = 0;
    // Updates come after the snapshot they follow; deleting while iterating a Map is well defined.
    for (const [id, update] of queue.updates) {
      if (committed || overBudget()) break;
      queue.updates.delete(id);
      applyItem(update);
    }
  } else if (queue.head > 20000) {
    queue.items = items.slice(queue.head);
    queue.head = 0;
  }
  return committed;
}

function applyItem(item) {
  if (item === SNAPSHOT_START) {
    models.staging = createModel();
  } else if (item === SNAPSHOT_END) {
    models.shown = models.staging || createModel();
    models.staging = null;
    state.loaded = true;
    markAllDirty();
    return true;
  } else if (typeof item.removed === "string") {
    removeTask(models.shown, item.removed);
    dirty.structure = dirty.rows = true;
    if (item.removed === state.selectedTaskId) dirty.details = true;
  } else if (isTask(item)) {
    const target = models.staging || models.shown;
    const change = upsertTask(target, item);
    if (target !== models.shown) return false;
    dirty.rows = true;
    if (change.structural || filterActive()) dirty.structure = true;
    if (change.newAgent) dirty.agents = true;
    if (item.task_id === state.selectedTaskId) dirty.details = true;
  }
  return false;
}

export function markAllDirty() {
  dirty.structure = dirty.rows = dirty.agents = dirty.details = true;
}
