/*
 * What each frame renders: the frame loop and its budget, the sessions list and the selection, the status
 * line.
 */
import {
  FRAME_BUDGET_MS,
  FRAME_TIMES_KEPT,
  MIN_APPLY_MS,
  STATUSES,
  applyQueued,
  countText,
  createModel,
  dirty,
  dom,
  enc,
  hook,
  make,
  markAllDirty,
  models,
  queue,
  queueIsEmpty,
  setText,
  state,
} from "./state.js";
import { connectStream } from "./stream.js";
import {
  flatten,
  renderAgentFilter,
  renderCancelSession,
  renderCounts,
  renderDetails,
  renderRows,
} from "./tree_view.js";

// ---------------------------------------------------------------- the frame loop

let frameRequested = false;

export function scheduleFrame() {
  if (frameRequested) return;
  frameRequested = true;
  requestAnimationFrame(onFrame);
}

function onFrame() {
  frameRequested = false;
  const start = performance.now();
  if (queueIsEmpty() && !Object.values(dirty).some(Boolean)) return; // nothing to do, nothing to time
  const committed = applyQueued(start + Math.max(MIN_APPLY_MS, FRAME_BUDGET_MS - state.renderCostMs));

  const renderStart = performance.now();
  if (dirty.agents) renderAgentFilter(); // may clear the agent filter, which changes the shape
  const rendering = dirty.structure || dirty.rows;
  if (dirty.structure) flatten();
  if (rendering) {
    renderRows();
    renderCounts();
  }
  if (dirty.details) renderDetails();
  dirty.structure = dirty.rows = dirty.agents = dirty.details = false;
  if (rendering) state.renderCostMs = performance.now() - renderStart;

  if (!queueIsEmpty()) scheduleFrame();
  hook.taskCount = models.shown.tasks.size;
  if (committed && !hook.ready && state.firstSnapshotAt !== null) {
    hook.readyAtMs = performance.now();
    hook.firstRenderMs = hook.readyAtMs - state.firstSnapshotAt;
    hook.ready = true;
  }
  if (hook.frameTimes.length >= FRAME_TIMES_KEPT) hook.frameTimes.shift();
  hook.frameTimes.push(performance.now() - start);
}

// ---------------------------------------------------------------- sessions and selection

export const sessionItems = new Map(); // session id -> {li, total, chips}

export function setSessions(sessions) {
  state.sessions = Array.isArray(sessions) ? sessions.filter((s) => s && typeof s.session_id === "string") : [];
  if (state.selected === null) {
    const first = state.sessions.find((s) => !state.goneSessions.has(s.session_id));
    if (first) selectSession(first.session_id);
  }
  renderSessions();
  renderCancelSession();
}

// Keyed by session id, so an overview each second updates the items in place.
export function renderSessions() {
  const seen = new Set();
  state.sessions.forEach((session, index) => {
    const id = session.session_id;
    seen.add(id);
    if (!sessionItems.has(id)) sessionItems.set(id, createSessionItem(id));
    const item = sessionItems.get(id);
    fillSessionItem(item, session);
    const here = dom.sessions.children[index];
    if (here !== item.li) dom.sessions.insertBefore(item.li, here || null);
  });
  for (const [id, item] of sessionItems) {
    if (!seen.has(id)) { item.li.remove(); sessionItems.delete(id); }
  }
  dom.sessionsEmpty.hidden = state.sessions.length > 0;
}

function createSessionItem(id) {
  const li = make("li", "session");
  li.dataset.sessionId = id;
  li.tabIndex = 0;
  const name = make("span", "session-id", id);
  name.title = id;
  const item = { li, total: make("span", "session-total"), chips: make("span", "chips"), chipsKey: null };
  li.append(name, item.total, item.chips);
  return item;
}

export function fillSessionItem(item, session) {
  const fromTree = session.session_id === state.selected && state.loaded;
  let counts = session.counts && typeof session.counts === "object" ? session.counts : {};
  let total = Number(session.total) || 0;
  if (fromTree) {
    counts = Object.fromEntries(models.shown.counts);
    total = models.shown.tasks.size;
  }
  setText(item.total, countText(total, total === 1 ? "task" : "tasks"));
  // Rebuilt only when a count changed: the overview comes every second for every session.
  const numbers = STATUSES.map((status) => Number(counts[status]) || 0);
  const key = numbers.join(",");
  if (item.chipsKey !== key) {
    item.chipsKey = key;
    const chips = [];
    STATUSES.forEach((status, index) => {
      if (numbers[index] === 0) return;
      const chip = make("span", "chip", countText(numbers[index], status));
      chip.dataset.status = status;
      chips.push(chip);
    });
    item.chips.replaceChildren(...chips);
  }
  const selected = session.session_id === state.selected;
  item.li.classList.toggle("selected", selected);
  item.li.setAttribute("aria-current", String(selected));
}

export function onSessionsInput(event) {
  if (event.type === "keydown" && event.key !== "Enter" && event.key !== " ") return;
  const li = event.target.closest("li[data-session-id]");
  if (!li) return;
  event.preventDefault();
  chooseSession(li.dataset.sessionId);
}

// A choice by the user: even a session that went away once may be picked again.
export function chooseSession(id) {
  state.goneSessions.delete(id);
  selectSession(id);
}

export function selectSession(id) {
  if (id === state.selected) return;
  state.selected = id;
  history.replaceState(null, "", id === null ? location.pathname + location.search : `#session=${enc(id)}`);
  resetSessionView();
  renderSessions();
  connectStream();
}

export function sessionFromHash() {
  const match = /^#session=(.*)$/.exec(location.hash);
  try {
    return match ? decodeURIComponent(match[1]) : null;
  } catch {
    return null; // a malformed escape in a hand-edited hash
  }
}

export function resetSessionView() {
  models.shown = createModel();
  models.staging = null;
  queue.items = [];
  queue.head = 0;
  queue.updates.clear();
  state.expanded.clear();
  state.selectedTaskId = null;
  state.loaded = false;
  state.firstSnapshotAt = null;
  state.filters.agent = ""; // agents belong to a session
  hook.ready = false;
  hook.firstRenderMs = hook.readyAtMs = null;
  dom.tree.scrollTop = state.scrollTop = 0;
  dom.sessionTitle.textContent = state.selected ?? "No session selected";
  dom.sessionTitle.title = state.selected ?? "";
  renderCancelSession();
  markAllDirty();
  scheduleFrame();
}

// ---------------------------------------------------------------- status line and connection dot

let messageTimer = 0;

export function showMessage(text, kind = "error") {
  dom.message.textContent = dom.message.title = text;
  dom.message.dataset.kind = kind;
  clearTimeout(messageTimer);
  if (kind === "info") messageTimer = setTimeout(() => setText(dom.message, ""), 6000);
}

export function setConnection(connection) {
  if (dom.connection.dataset.state === connection) return;
  dom.connection.dataset.state = connection;
  const label = connection === "unavailable" ? "registry unavailable" : connection;
  dom.connectionLabel.textContent = label;
  dom.connection.title = `Live stream: ${label}`;
}
