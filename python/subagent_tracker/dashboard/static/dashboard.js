"use strict";
/*
 * The subagent-tracker dashboard: the sessions list, a chart of the last five minutes and a live,
 * virtualized task tree of the selected session, fed by the server's event stream (api/stream).
 *
 * Rules this file keeps:
 * - Escaping: server data reaches the DOM only through textContent, value, title and dataset; never
 *   through HTML parsing, event-handler attributes, href or src. URLs are relative constants plus ids
 *   passed through encodeURIComponent, so the app also works mounted under a prefix. Ids travel in the
 *   query, never in the path, where a URL parser drops an id of "." or "..".
 * - User text (ids, reasons) is isolated for bidi: by CSS in its own elements, and by U+2068/U+2069
 *   (isolate()) inside a sentence, so a direction override in it cannot reorder the page's own text.
 * - Budget: stream updates are queued and applied in requestAnimationFrame callbacks, about 8 ms of
 *   work per frame. The visible-row list is flattened at most once per frame and only after a change of
 *   shape (a task that appears, moves, or starts or stops being pending, which moves it among its
 *   siblings); otherwise a frame re-renders just the rows in the viewport, the only rows in the DOM.
 */
(() => {
  const ROW_HEIGHT = 28; // px, equal to --row-height in dashboard.css
  const OVERSCAN_ROWS = 8;
  const FRAME_BUDGET_MS = 8;
  const MIN_APPLY_MS = 2; // even after a costly render, keep draining the queue
  const COLLAPSE_ABOVE = 50; // children: a bigger subtree starts collapsed
  const INDENT_PX = 14;
  const MAX_INDENT_LEVELS = 12; // deeper rows stop moving right, so their ids stay readable
  const RECONNECT_MS = 1000;
  const FRAME_TIMES_KEPT = 2000;
  const TOKEN_KEY = "subagent-tracker-token";
  const CANCEL_REASON = "cancelled from the dashboard";
  const CHART_SECONDS = 300;
  const STATUSES = ["running", "queued", "paused", "completed", "failed", "cancelled"];
  const DETAIL_KEYS = ["metadata", "result", "error", "error_type", "error_code"];

  // Read by browser tests and the benchmark; see the spec.
  // readyAtMs: performance.now() (ms since the page's navigation began) when the first snapshot was shown.
  const hook = {
    ready: false, firstRenderMs: null, readyAtMs: null, frameTimes: [], taskCount: 0, renderedRows: 0,
  };
  window.subagentDashboard = hook;

  const camel = (name) => name.replace(/-(\w)/g, (_, letter) => letter.toUpperCase());

  // The elements the script touches, by id: dom.filterStatus is #filter-status.
  const dom = {};
  for (const id of [
    "connection", "connection-label", "message", "sessions", "sessions-empty", "chart", "session-title",
    "filter-status", "filter-agent", "filter-text", "tree-count", "cancel-session", "tree", "tree-sizer",
    "tree-empty", "details", "details-title", "details-body", "details-close", "confirm", "confirm-text",
    "confirm-yes", "confirm-no", "token-dialog", "token-input", "token-cancel",
  ]) {
    dom[camel(id)] = document.getElementById(id);
  }

  const state = {
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
  let model = createModel();
  let staging = null;
  // items: a snapshot being loaded, in order. updates: the latest version of each task changed since (or an
  // eviction), keyed by id, so a backlog (a background tab gets no frames) holds each task once.
  const queue = { items: [], head: 0, updates: new Map() };
  let view = { ids: [], depths: [], context: [], matches: 0 };
  const dirty = { structure: false, rows: false, agents: false, details: false };
  let frameRequested = false;

  // ---------------------------------------------------------------- small helpers

  function make(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Writing the same text again still costs a DOM mutation and a style pass.
  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function setLabel(node, value) {
    const text = value == null ? "" : String(value);
    setText(node, text);
    if (node.title !== text) node.title = text;
  }

  const enc = encodeURIComponent;
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const serverNow = () => Date.now() / 1000 + state.clockOffset;
  // The server says which tasks are pending (the core's rule), so the page never repeats it.
  const isPending = (task) => task.pending === true;
  const hasDetails = (task) => DETAIL_KEYS.some((key) => key in task);
  const isTask = (item) => item !== null && typeof item === "object" && typeof item.task_id === "string";
  const countText = (n, noun) => `${n.toLocaleString("en")} ${noun}`;
  const plural = (n, one, many) => countText(n, n === 1 ? one : many);
  // First strong isolate ... pop directional isolate: user text inside a sentence keeps its own direction.
  const isolate = (text) => `\u2068${text}\u2069`;
  const query = (ids) => Object.entries(ids).map(([key, value]) => `${key}=${enc(value)}`).join("&");

  function syncClock(now) {
    if (typeof now === "number" && Number.isFinite(now)) state.clockOffset = now - Date.now() / 1000;
  }

  // A cancelled task that has not finished yet is still stopping.
  function statusOf(task) {
    return task.status === "cancelled" && !task.finished ? "cancelling" : String(task.status);
  }

  const pad2 = (n) => String(n).padStart(2, "0");

  function formatDuration(seconds) {
    const s = Math.max(0, seconds);
    if (s < 10) return `${(Math.floor(s * 10) / 10).toFixed(1)}s`;
    if (s < 60) return `${Math.floor(s)}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${pad2(Math.floor(s % 60))}s`;
    return `${Math.floor(s / 3600)}h ${pad2(Math.floor((s % 3600) / 60))}m`;
  }

  function formatCountdown(seconds) {
    if (seconds <= 0) return "0s";
    return seconds < 60 ? `${Math.ceil(seconds)}s` : formatDuration(seconds);
  }

  // ---------------------------------------------------------------- the task model

  function createModel() {
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
  function hasPendingDescendant(id) {
    if (!model.pendingAncestors) {
      const marked = new Set();
      for (const pendingId of model.pending) {
        let parent = model.tasks.get(pendingId).parent_id;
        while (parent != null && model.tasks.has(parent) && !marked.has(parent)) {
          marked.add(parent);
          parent = model.tasks.get(parent).parent_id;
        }
      }
      model.pendingAncestors = marked;
    }
    return model.pendingAncestors.has(id);
  }

  // ---------------------------------------------------------------- the update queue

  // Markers around a snapshot's tasks in the queue; no parsed JSON can be identical to them.
  const SNAPSHOT_START = Object.freeze({});
  const SNAPSHOT_END = Object.freeze({});

  function enqueueSnapshot(tasks) {
    // A snapshot replaces the model, so whatever is still queued is superseded.
    queue.items = [SNAPSHOT_START, ...tasks.filter(isTask), SNAPSHOT_END];
    queue.head = 0;
    queue.updates.clear();
    staging = null;
    scheduleFrame();
  }

  function enqueueTasks(tasks, removed) {
    for (const task of tasks) if (isTask(task)) queue.updates.set(task.task_id, task);
    for (const id of removed) if (typeof id === "string") queue.updates.set(id, { removed: id });
    scheduleFrame();
  }

  const queueIsEmpty = () => queue.head >= queue.items.length && queue.updates.size === 0;

  /**
   * Applies queued items until the deadline, or until a snapshot is swapped in (the frame's time then
   * goes to showing it); answers whether one was.
   */
  function applyQueued(deadline) {
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
      staging = createModel();
    } else if (item === SNAPSHOT_END) {
      model = staging || createModel();
      staging = null;
      state.loaded = true;
      markAllDirty();
      return true;
    } else if (typeof item.removed === "string") {
      removeTask(model, item.removed);
      dirty.structure = dirty.rows = true;
      if (item.removed === state.selectedTaskId) dirty.details = true;
    } else if (isTask(item)) {
      const target = staging || model;
      const change = upsertTask(target, item);
      if (target !== model) return false;
      dirty.rows = true;
      if (change.structural || filterActive()) dirty.structure = true;
      if (change.newAgent) dirty.agents = true;
      if (item.task_id === state.selectedTaskId) dirty.details = true;
    }
    return false;
  }

  function markAllDirty() {
    dirty.structure = dirty.rows = dirty.agents = dirty.details = true;
  }

  // ---------------------------------------------------------------- the frame loop

  function scheduleFrame() {
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
    hook.taskCount = model.tasks.size;
    if (committed && !hook.ready && state.firstSnapshotAt !== null) {
      hook.readyAtMs = performance.now();
      hook.firstRenderMs = hook.readyAtMs - state.firstSnapshotAt;
      hook.ready = true;
    }
    if (hook.frameTimes.length >= FRAME_TIMES_KEPT) hook.frameTimes.shift();
    hook.frameTimes.push(performance.now() - start);
  }

  // ---------------------------------------------------------------- filters and flattening

  const filterActive = () => Boolean(state.filters.status || state.filters.agent || state.filters.text);

  // Lower-cased searchable text, cached per task object: an update brings a new object, so never stale.
  const haystacks = new WeakMap();
  function haystackOf(task) {
    let text = haystacks.get(task);
    if (text === undefined) {
      const fields = [
        task.task_id, task.agent, task.description, task.progress, task.cancel_reason, task.pause_reason, task.worker,
      ];
      // The newline keeps a query from matching across two fields: the search box cannot type one.
      text = fields.filter((f) => typeof f === "string").join("\n").toLowerCase();
      haystacks.set(task, text);
    }
    return text;
  }

  function matchesFilters(task) {
    const { status, agent, text } = state.filters;
    if (status && statusOf(task) !== status) return false;
    if (agent && task.agent !== agent) return false;
    return !text || haystackOf(task).includes(text);
  }

  // The matches plus their ancestors, so the filtered tree keeps its shape.
  function collectFiltered(m) {
    const matches = new Set();
    for (const [id, task] of m.tasks) if (matchesFilters(task)) matches.add(id);
    const keep = new Set(matches);
    for (const id of matches) {
      let parent = m.tasks.get(id).parent_id;
      while (parent != null && m.tasks.has(parent) && !keep.has(parent)) {
        keep.add(parent);
        parent = m.tasks.get(parent).parent_id;
      }
    }
    return { matches, keep };
  }

  // A task whose parent is absent from the model (none, or evicted) is shown at the root level.
  function isRoot(m, task) {
    return task.parent_id == null || !m.tasks.has(task.parent_id);
  }

  // The user's toggle wins. Otherwise roots are open, so the top of the tree always shows, and so is
  // everything under a filter, where the >50 default would bury matches.
  function isExpanded(id, filtering) {
    const choice = state.expanded.get(id);
    if (choice !== undefined) return choice;
    const kids = model.children.get(id);
    return filtering || !kids || kids.size <= COLLAPSE_ABOVE || isRoot(model, model.tasks.get(id));
  }

  /** Recomputes the visible rows in tree order: one O(n) pass, iterative so deep chains cannot overflow. */
  function flatten() {
    const m = model;
    const filtering = filterActive();
    const { matches, keep } = filtering ? collectFiltered(m) : { matches: null, keep: null };
    const roots = [];
    for (const [id, task] of m.tasks) if (isRoot(m, task) && (!keep || keep.has(id))) roots.push(id);
    // Siblings in start order, the pending ones first: running work never hides among finished rows.
    const pendingFirst = (ids) => {
      const pending = [];
      const finished = [];
      for (const id of ids) (m.pending.has(id) ? pending : finished).push(id);
      return pending.concat(finished).values();
    };

    const ids = [];
    const depths = [];
    const context = [];
    const stack = [{ children: pendingFirst(roots), depth: 0 }];
    while (stack.length) {
      const level = stack[stack.length - 1];
      const next = level.children.next();
      if (next.done) { stack.pop(); continue; }
      const id = next.value;
      if (keep && !keep.has(id)) continue;
      ids.push(id);
      depths.push(level.depth);
      context.push(matches !== null && !matches.has(id));
      const kids = m.children.get(id);
      if (kids && kids.size && isExpanded(id, filtering)) {
        stack.push({ children: pendingFirst(kids), depth: level.depth + 1 });
      }
    }
    view = { ids, depths, context, matches: matches ? matches.size : m.tasks.size };
    dom.treeSizer.style.height = `${ids.length * ROW_HEIGHT}px`;
  }

  function toggleExpanded(id) {
    state.expanded.set(id, !isExpanded(id, filterActive()));
    dirty.structure = true;
    scheduleFrame();
  }

  function renderAgentFilter() {
    const current = state.filters.agent;
    const options = ["", ...[...model.agents].sort()].map((agent) => {
      const option = make("option", null, agent || "All");
      option.value = agent;
      return option;
    });
    dom.filterAgent.replaceChildren(...options);
    dom.filterAgent.value = current;
    if (dom.filterAgent.value !== current) {
      state.filters.agent = dom.filterAgent.value = "";
      dirty.structure = true;
    }
  }

  // ---------------------------------------------------------------- rows of the virtualized tree

  const rowPool = { active: [], spare: [] };

  // A row's cells by class name, in order; the tree cell holds the toggle slot, status and id.
  const ROW_CELLS = ["tree-cell", "agent", "description", "age", "progress", "cancel-info", "deadline", "worker"];
  const TREE_CELLS = ["toggle-slot", "status", "task-id"];

  /** A row element and its parts, as row.el, row.treeCell, row.taskId, ...; filled by fillRow. */
  function createRow() {
    const row = { el: make("div", "task"), toggle: make("button", "toggle"), cancel: make("button", "cancel") };
    row.toggle.type = row.cancel.type = "button";
    for (const name of [...ROW_CELLS, ...TREE_CELLS]) row[camel(name)] = make("span", name);
    row.treeCell.append(...TREE_CELLS.map((name) => row[camel(name)]));
    row.el.append(...ROW_CELLS.map((name) => row[camel(name)]));
    return row;
  }

  /** Puts exactly the rows in the viewport (plus overscan) in the DOM, reusing row elements. */
  function renderRows() {
    const total = view.ids.length;
    // The cached scrollTop may predate a shrink of the list: the browser clamps it, and scrolls later.
    const top = Math.min(state.scrollTop, Math.max(0, total * ROW_HEIGHT - state.viewportHeight));
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN_ROWS);
    const last = Math.min(total, Math.ceil((top + state.viewportHeight) / ROW_HEIGHT) + OVERSCAN_ROWS);
    const count = Math.max(0, last - first);

    while (rowPool.active.length < count) {
      const row = rowPool.spare.pop() || createRow();
      dom.treeSizer.append(row.el);
      rowPool.active.push(row);
    }
    while (rowPool.active.length > count) {
      const row = rowPool.active.pop();
      row.el.remove();
      rowPool.spare.push(row);
    }
    for (let k = 0; k < count; k++) fillRow(rowPool.active[k], first + k);
    hook.renderedRows = count;
    renderEmptyNote(total);
  }

  function fillRow(row, index) {
    const id = view.ids[index];
    const task = model.tasks.get(id);
    const status = statusOf(task);
    const el = row.el;
    el.style.top = `${index * ROW_HEIGHT}px`;
    if (el.dataset.taskId !== id) el.dataset.taskId = id;
    if (el.dataset.status !== status) el.dataset.status = status;
    el.classList.toggle("context", view.context[index]);
    el.classList.toggle("selected", id === state.selectedTaskId);
    el.classList.toggle("has-details", hasDetails(task));
    row.treeCell.style.paddingLeft = `${Math.min(view.depths[index], MAX_INDENT_LEVELS) * INDENT_PX}px`;

    fillToggle(row, id);
    setText(row.status, status);
    setLabel(row.taskId, id);
    setLabel(row.agent, task.agent);
    setLabel(row.description, task.description);
    setLabel(row.age, ageText(task, status));
    setLabel(row.progress, task.progress);
    setLabel(row.cancelInfo, statusInfoText(task));
    fillDeadline(row.deadline, task);
    setLabel(row.worker, task.worker);
    fillCancelButton(row, id, task);
  }

  function fillToggle(row, id) {
    const count = model.children.get(id)?.size ?? 0;
    if (count === 0) { row.toggle.remove(); return; }
    const open = isExpanded(id, filterActive());
    setText(row.toggle, open ? "▾" : `▸ ${count}`);
    row.toggle.title = open ? "Collapse" : `Expand ${count} children`;
    row.toggle.setAttribute("aria-expanded", String(open));
    if (row.toggle.parentNode !== row.toggleSlot) row.toggleSlot.append(row.toggle);
  }

  function ageText(task, status) {
    if (typeof task.started_at !== "number") return "";
    if (task.finished) {
      return typeof task.ended_at === "number" ? `took ${formatDuration(task.ended_at - task.started_at)}` : "";
    }
    const verb = status === "queued" ? "queued for" : "running for";
    return `${verb} ${formatDuration(serverNow() - task.started_at)}`;
  }

  // What a paused task waits for ("paused: <reason>"); why a cancelled one stopped ("reason · by <origin>
  // (<cause>)"), leaving out the parts the task does not have.
  function statusInfoText(task) {
    if (task.status === "paused") return task.pause_reason ? `paused: ${task.pause_reason}` : "paused";
    if (task.status !== "cancelled") return "";
    let by = task.cancel_origin ? `by ${task.cancel_origin}` : "";
    if (task.cancel_cause) by = `${by} (${task.cancel_cause})`.trim();
    return [task.cancel_reason, by].filter(Boolean).join(" · ");
  }

  function fillDeadline(node, task) {
    const shown = isPending(task) && typeof task.deadline === "number";
    const left = shown ? task.deadline - serverNow() : 0;
    setText(node, shown ? `⏱ ${formatCountdown(left)}` : "");
    node.title = shown ? "Time left before the deadline" : "";
    node.classList.toggle("urgent", shown && left < 5);
  }

  function fillCancelButton(row, id, task) {
    if (!isPending(task)) { row.cancel.remove(); return; }
    setText(row.cancel, hasPendingDescendant(id) ? "Cancel subtree" : "Cancel");
    if (row.cancel.parentNode !== row.el) row.el.append(row.cancel);
  }

  function renderEmptyNote(total) {
    let note = "";
    if (state.selected === null) note = "No session selected.";
    else if (total > 0) note = "";
    else if (!state.loaded) note = "Loading tasks…";
    else if (model.tasks.size === 0) note = "No tasks in this session yet.";
    else note = "No task matches the filters.";
    setText(dom.treeEmpty, note);
    dom.treeEmpty.hidden = note === "";
  }

  function renderCounts() {
    const parts = [];
    if (model.tasks.size) parts.push(countText(model.tasks.size, "tasks"));
    if (model.pending.size) parts.push(countText(model.pending.size, "pending"));
    if (filterActive()) parts.push(countText(view.matches, "matching"));
    setText(dom.treeCount, parts.join(" · "));
    renderSelectedSessionItem();
    renderCancelSession();
  }

  // Greyed while nothing is pending: on every frame that draws rows, and on every overview before the
  // session's tasks have loaded.
  function renderCancelSession() {
    dom.cancelSession.disabled = state.selected === null || pendingInSelectedSession() === 0;
    dom.cancelSession.title = dom.cancelSession.disabled ? "Nothing is pending in this session" : "";
  }

  // The selected session's counts in the sidebar come from the tree once it is loaded, so the two agree;
  // the once-a-second overview lags the stream.
  function renderSelectedSessionItem() {
    const item = state.selected === null ? undefined : sessionItems.get(state.selected);
    const session = state.sessions.find((s) => s.session_id === state.selected);
    if (item && session) fillSessionItem(item, session);
  }

  function onTreeClick(event) {
    const rowEl = event.target.closest(".task");
    if (!rowEl) return;
    const id = rowEl.dataset.taskId;
    if (event.target.closest(".toggle")) toggleExpanded(id);
    else if (event.target.closest(".cancel")) cancelTask(id);
    else selectTask(id);
  }

  // ---------------------------------------------------------------- details panel

  function selectTask(id) {
    state.selectedTaskId = id;
    dirty.rows = dirty.details = true;
    scheduleFrame();
  }

  function renderDetails() {
    const task = state.selectedTaskId === null ? undefined : model.tasks.get(state.selectedTaskId);
    if (!task) { dom.details.hidden = true; return; }
    const parts = [];
    for (const key of DETAIL_KEYS) {
      if (key in task) parts.push(make("h4", null, key), make("pre", null, JSON.stringify(task[key], null, 2) ?? "null"));
    }
    // The whole id, which a row may cut: sibling ids often differ only at the end.
    dom.detailsTitle.textContent = dom.detailsTitle.title = task.task_id;
    if (!parts.length) parts.push(make("p", "details-none", `${task.status}; no metadata, result or error to show`));
    dom.detailsBody.replaceChildren(...parts);
    dom.details.hidden = false;
  }

  // ---------------------------------------------------------------- sessions and selection

  const sessionItems = new Map(); // session id -> {li, total, chips}

  function setSessions(sessions) {
    state.sessions = Array.isArray(sessions) ? sessions.filter((s) => s && typeof s.session_id === "string") : [];
    if (state.selected === null) {
      const first = state.sessions.find((s) => !state.goneSessions.has(s.session_id));
      if (first) selectSession(first.session_id);
    }
    renderSessions();
    renderCancelSession();
  }

  // Keyed by session id, so an overview each second updates the items in place.
  function renderSessions() {
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

  function fillSessionItem(item, session) {
    const fromTree = session.session_id === state.selected && state.loaded;
    let counts = session.counts && typeof session.counts === "object" ? session.counts : {};
    let total = Number(session.total) || 0;
    if (fromTree) {
      counts = Object.fromEntries(model.counts);
      total = model.tasks.size;
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

  function onSessionsInput(event) {
    if (event.type === "keydown" && event.key !== "Enter" && event.key !== " ") return;
    const li = event.target.closest("li[data-session-id]");
    if (!li) return;
    event.preventDefault();
    chooseSession(li.dataset.sessionId);
  }

  // A choice by the user: even a session that went away once may be picked again.
  function chooseSession(id) {
    state.goneSessions.delete(id);
    selectSession(id);
  }

  function selectSession(id) {
    if (id === state.selected) return;
    state.selected = id;
    history.replaceState(null, "", id === null ? location.pathname + location.search : `#session=${enc(id)}`);
    resetSessionView();
    renderSessions();
    connectStream();
  }

  function sessionFromHash() {
    const match = /^#session=(.*)$/.exec(location.hash);
    try {
      return match ? decodeURIComponent(match[1]) : null;
    } catch {
      return null; // a malformed escape in a hand-edited hash
    }
  }

  function resetSessionView() {
    model = createModel();
    staging = null;
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

  // ---------------------------------------------------------------- chart

  const chart = { ctx: null, width: 0, height: 0, colors: {} };

  function setupChart() {
    const canvas = dom.chart;
    chart.width = canvas.width;
    chart.height = canvas.height;
    // Sharp on high-density screens: a bigger backing store at the same CSS size.
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(chart.width * ratio);
    canvas.height = Math.round(chart.height * ratio);
    chart.ctx = canvas.getContext("2d");
    chart.ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    const css = getComputedStyle(document.documentElement);
    const color = (name) => css.getPropertyValue(name).trim() || "#888";
    chart.colors = { starts: color("--c-running"), ends: color("--c-completed"), latency: color("--c-cancelling"),
      grid: color("--border"), text: color("--muted") };
    drawChart([]);
  }

  function niceCeiling(value) {
    const power = 10 ** Math.floor(Math.log10(value));
    return [1, 2, 5, 10].map((step) => step * power).find((candidate) => candidate >= value);
  }

  function seriesMax(points, value) {
    let max = 0;
    for (const point of points) {
      const v = value(point);
      if (typeof v === "number" && v > max) max = v;
    }
    return max;
  }

  /** Starts/s and ends/s on the left axis, cancel→stopped latency p50 in ms on the right one. */
  function drawChart(points) {
    const { ctx, width, height, colors } = chart;
    const plot = { left: 30, right: width - 40, top: 20, bottom: height - 14 };
    ctx.clearRect(0, 0, width, height);
    const end = points.length ? points[points.length - 1].t : Math.floor(serverNow());
    const x = (t) => plot.left + ((t - (end - CHART_SECONDS)) / CHART_SECONDS) * (plot.right - plot.left);
    const y = (fraction) => plot.bottom - fraction * (plot.bottom - plot.top);
    const latency = (p) => (typeof p.cancel_latency_p50 === "number" ? p.cancel_latency_p50 * 1000 : null);
    const rateMax = niceCeiling(Math.max(1, seriesMax(points, (p) => p.starts), seriesMax(points, (p) => p.ends)));
    const latencyMax = niceCeiling(Math.max(1, seriesMax(points, latency)));

    drawAxes(plot, rateMax, latencyMax);
    drawSeries(points, x, (p) => y(p.starts / rateMax), colors.starts, false);
    drawSeries(points, x, (p) => y(p.ends / rateMax), colors.ends, false);
    drawSeries(points, x, (p) => (latency(p) === null ? null : y(latency(p) / latencyMax)), colors.latency, true);
    drawLegend([["starts/s", colors.starts], ["ends/s", colors.ends], ["cancel p50 ms", colors.latency]]);
  }

  function drawAxes(plot, rateMax, latencyMax) {
    const { ctx, colors } = chart;
    ctx.strokeStyle = colors.grid;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (const fraction of [0, 0.5, 1]) {
      const py = Math.round(plot.bottom - fraction * (plot.bottom - plot.top)) + 0.5;
      ctx.moveTo(plot.left, py);
      ctx.lineTo(plot.right, py);
    }
    ctx.stroke();
    ctx.fillStyle = colors.text;
    ctx.font = "10px system-ui, sans-serif";
    const label = (text, px, py, align, baseline) => {
      ctx.textAlign = align;
      ctx.textBaseline = baseline;
      ctx.fillText(text, px, py);
    };
    label(String(rateMax), plot.left - 4, plot.top, "right", "middle");
    label("0", plot.left - 4, plot.bottom, "right", "middle");
    label(`${latencyMax} ms`, plot.right + 4, plot.top, "left", "middle");
    label("0", plot.right + 4, plot.bottom, "left", "middle");
    label("−5 min", plot.left, plot.bottom + 2, "left", "top");
    label("now", plot.right, plot.bottom + 2, "right", "top");
  }

  // A null value breaks the line. Latency exists only in seconds with cancels, so it also gets dots.
  function drawSeries(points, x, y, color, dots) {
    const { ctx } = chart;
    ctx.strokeStyle = ctx.fillStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let drawing = false;
    for (const point of points) {
      const py = typeof point.t === "number" ? y(point) : null;
      if (py === null || !Number.isFinite(py)) { drawing = false; continue; }
      const px = x(point.t);
      if (drawing) ctx.lineTo(px, py);
      else ctx.moveTo(px, py);
      drawing = true;
      if (dots) ctx.fillRect(px - 1.5, py - 1.5, 3, 3);
    }
    ctx.stroke();
  }

  function drawLegend(entries) {
    const { ctx } = chart;
    ctx.font = "10px system-ui, sans-serif";
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    let left = 4;
    for (const [text, color] of entries) {
      ctx.fillStyle = color;
      ctx.fillRect(left, 5, 10, 3);
      ctx.fillText(text, left + 13, 7);
      left += 23 + ctx.measureText(text).width;
    }
  }

  // ---------------------------------------------------------------- API and token

  const apiUrl = (path) => new URL(path, document.baseURI);
  const authHeaders = (token) => (token ? { Authorization: `Bearer ${token}` } : {});

  // Storage can be disabled: then the page runs without a kept token and asks on each 401.
  function getToken() {
    try { return sessionStorage.getItem(TOKEN_KEY); } catch { return null; }
  }

  function storeToken(token) {
    try { sessionStorage.setItem(TOKEN_KEY, token); } catch { /* see getToken */ }
  }

  let tokenRequest = null;

  /** Shows the token dialog once for any number of callers; resolves to the new token, or null if dismissed. */
  function askToken() {
    if (tokenRequest) return tokenRequest;
    tokenRequest = new Promise((resolve) => {
      const dialog = dom.tokenDialog;
      dom.tokenInput.value = "";
      dialog.returnValue = "";
      dialog.addEventListener("close", () => {
        tokenRequest = null;
        const token = dialog.returnValue === "ok" ? dom.tokenInput.value.trim() : "";
        dom.tokenInput.value = "";
        state.tokenDeclined = !token;
        if (token) storeToken(token);
        resolve(token || null);
      }, { once: true });
      dialog.showModal();
    });
    return tokenRequest;
  }

  // After a 401 for the token `used`: a request that raced with a token change just retries.
  async function renewToken(used) {
    if (getToken() !== used) return true;
    if (state.tokenDeclined) return false;
    return (await askToken()) !== null;
  }

  async function readJson(response) {
    try { return JSON.parse(await response.text()); } catch { return null; }
  }

  async function api(path, { method = "GET", body } = {}) {
    for (;;) {
      const token = getToken();
      const headers = authHeaders(token);
      if (method !== "GET") {
        headers["Content-Type"] = "application/json";
        headers["X-Subagent-Tracker-Action"] = "1";
      }
      const init = { method, headers, cache: "no-store" };
      if (body !== undefined) init.body = JSON.stringify(body);
      const response = await fetch(apiUrl(path), init);
      if (response.status === 401 && (await renewToken(token))) continue;
      const data = await readJson(response);
      if (response.ok) return data;
      const reason = data && typeof data.error === "string" ? data.error : `HTTP ${response.status}`;
      throw new Error(response.status === 401 ? `unauthorized (${reason})` : reason);
    }
  }

  async function loadSessions() {
    try {
      const data = await api("api/sessions");
      syncClock(data?.now);
      setSessions(data?.sessions);
    } catch (error) {
      showMessage(`Could not list the sessions: ${error.message}`);
    }
  }

  // ---------------------------------------------------------------- the event stream

  const stream = { controller: null, generation: 0 };

  function connectStream() {
    stream.controller?.abort();
    stream.controller = new AbortController();
    runStream(state.selected, stream.controller.signal, ++stream.generation);
  }

  async function runStream(session, signal, generation) {
    while (!signal.aborted) {
      let outcome = "retry";
      // The server answers 503 when it cannot read the registry: it is there, its data is not.
      let connection = "disconnected";
      try {
        outcome = await readStream(session, signal, generation);
      } catch (error) {
        if (error.httpStatus) showMessage(error.message, "stream"); // network drops just show in the dot
        if (error.httpStatus === 503) connection = "unavailable";
      }
      if (signal.aborted) return;
      setConnection(connection);
      if (outcome === "stop") {
        showMessage("Unauthorized: reload the page to enter a token.");
        return;
      }
      await sleep(RECONNECT_MS);
    }
  }

  /** One connection: answers "retry" when it ends, "stop" when the user declined to give a token. */
  async function readStream(session, signal, generation) {
    setConnection("connecting");
    const url = apiUrl("api/stream");
    if (session !== null) url.searchParams.set("session", session);
    const token = getToken();
    const response = await fetch(url, { headers: authHeaders(token), signal, cache: "no-store" });
    if (response.status === 401) return (await renewToken(token)) ? "retry" : "stop";
    if (response.status === 404 && session !== null) {
      onGone({ session_id: session }); // an unknown session, e.g. from an old link
      return "retry";
    }
    if (!response.ok || !response.body) {
      const data = await readJson(response);
      throw Object.assign(new Error(`Live stream: ${data?.error || `HTTP ${response.status}`}`),
        { httpStatus: response.status });
    }
    // Connected once the first event says the data is live (see dispatchStreamEvent).
    // Events still parsed from a connection left behind must not reach the new session's model.
    const feed = createSseParser((name, data, receivedAt) => {
      if (generation === stream.generation) dispatchStreamEvent(name, data, receivedAt);
    });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return "retry";
      feed(decoder.decode(value, { stream: true }));
    }
  }

  /**
   * SSE framing: blocks end at a blank line; "event:" and "data:" lines; ":" lines are keep-alives.
   * Line ends may be \r\n, \r or \n, even split across chunks. The search for the blank line resumes
   * where it stopped, so a multi-megabyte snapshot arriving in many chunks is scanned once.
   */
  function createSseParser(onEvent) {
    let buffer = "";
    let scanFrom = 0;
    let carriageReturn = false;
    return function feed(chunk) {
      let text = carriageReturn ? `\r${chunk}` : chunk;
      carriageReturn = text.endsWith("\r");
      if (carriageReturn) text = text.slice(0, -1);
      buffer += text.replace(/\r\n?/g, "\n");
      let start = 0;
      let end;
      while ((end = buffer.indexOf("\n\n", Math.max(start, scanFrom))) !== -1) {
        parseBlock(buffer.slice(start, end), onEvent);
        start = end + 2;
      }
      buffer = buffer.slice(start);
      scanFrom = Math.max(0, buffer.length - 1);
    };
  }

  function parseBlock(block, onEvent) {
    const receivedAt = performance.now();
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    if (data.length === 0) return;
    let payload;
    try {
      payload = JSON.parse(data.join("\n"));
    } catch {
      return; // a broken event is skipped: the next snapshot or update repairs the view
    }
    if (payload && typeof payload === "object") onEvent(name, payload, receivedAt);
  }

  function dispatchStreamEvent(name, data, receivedAt) {
    // The server says whether what it sends is live: "connected" shows only while it is.
    if (name === "unavailable") {
      setConnection("unavailable");
      showMessage(`Live data paused: ${data.error}`, "stream");
      return;
    }
    if (dom.connection.dataset.state !== "connected") {
      setConnection("connected");
      // What the stream said of its own trouble is over; other messages stay.
      if (dom.message.dataset.kind === "stream") setText(dom.message, "");
    }
    if (name === "overview") onOverview(data);
    else if (name === "snapshot") onSnapshot(data, receivedAt);
    else if (name === "tasks") onTasks(data);
    else if (name === "gone") onGone(data);
  }

  function onOverview(data) {
    if (typeof data.notice === "string") dom.sessionsEmpty.textContent = data.notice;
    syncClock(data.now);
    setSessions(data.sessions);
    if (Array.isArray(data.chart)) drawChart(data.chart.filter((p) => p && typeof p === "object"));
  }

  function onSnapshot(data, receivedAt) {
    if (data.session_id !== state.selected || !Array.isArray(data.tasks)) return;
    syncClock(data.now);
    if (state.firstSnapshotAt === null) state.firstSnapshotAt = receivedAt;
    enqueueSnapshot(data.tasks);
  }

  function onTasks(data) {
    if (state.selected === null || !Array.isArray(data.tasks)) return;
    syncClock(data.now);
    enqueueTasks(data.tasks, Array.isArray(data.removed) ? data.removed : []);
  }

  function onGone(data) {
    const id = data.session_id;
    state.goneSessions.add(id);
    state.sessions = state.sessions.filter((s) => s.session_id !== id);
    if (id === state.selected) {
      showMessage(`Session ${isolate(id)} no longer exists.`, "info");
      const next = state.sessions.find((s) => !state.goneSessions.has(s.session_id));
      selectSession(next ? next.session_id : null);
    }
    renderSessions();
  }

  // ---------------------------------------------------------------- actions

  async function cancelTask(taskId) {
    const sid = state.selected;
    if (sid === null) return;
    const ids = query({ session: sid, task: taskId });
    const shown = isolate(taskId);
    try {
      const pending = Number((await api(`api/task/subtree?${ids}`))?.pending) || 0;
      if (pending === 0) { showMessage(`${shown} has already finished.`, "info"); return; }
      const question = pending === 1
        ? `Cancel ${shown}?`
        : `Cancel ${pending} tasks? ${shown} and its ${plural(pending - 1, "pending descendant", "pending descendants")}.`;
      if (!(await confirmAction(question))) return;
      await api(`api/task/cancel?${ids}`, { method: "POST", body: { reason: CANCEL_REASON } });
      showMessage(`Cancelled ${shown}.`, "info");
    } catch (error) {
      showMessage(`Could not cancel ${shown}: ${error.message}`);
    }
  }

  // Once loaded, the stream's model is fresher than the once-a-second counts.
  function pendingInSelectedSession() {
    if (state.loaded) return model.pending.size;
    return Number(state.sessions.find((s) => s.session_id === state.selected)?.pending) || 0;
  }

  async function cancelSession() {
    const sid = state.selected;
    if (sid === null) return;
    const pending = pendingInSelectedSession();
    const shown = isolate(sid);
    const question = `Cancel session ${shown}? Its ${plural(pending, "pending task", "pending tasks")} will be cancelled.`;
    if (!(await confirmAction(question))) return;
    try {
      const result = await api(`api/session/cancel?${query({ session: sid })}`, {
        method: "POST", body: { reason: CANCEL_REASON },
      });
      showMessage(`Cancelled ${plural(Number(result?.cancelled) || 0, "task", "tasks")} of ${shown}.`, "info");
    } catch (error) {
      showMessage(`Could not cancel session ${shown}: ${error.message}`);
    }
  }

  function confirmAction(text) {
    const dialog = dom.confirm;
    if (dialog.open) return Promise.resolve(false);
    dom.confirmText.textContent = text;
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true });
      dialog.showModal();
      dom.confirmNo.focus(); // Enter must not cancel anything by accident
    });
  }

  // ---------------------------------------------------------------- status line and connection dot

  let messageTimer = 0;

  function showMessage(text, kind = "error") {
    dom.message.textContent = dom.message.title = text;
    dom.message.dataset.kind = kind;
    clearTimeout(messageTimer);
    if (kind === "info") messageTimer = setTimeout(() => setText(dom.message, ""), 6000);
  }

  function setConnection(connection) {
    if (dom.connection.dataset.state === connection) return;
    dom.connection.dataset.state = connection;
    const label = connection === "unavailable" ? "registry unavailable" : connection;
    dom.connectionLabel.textContent = label;
    dom.connection.title = `Live stream: ${label}`;
  }

  // ---------------------------------------------------------------- wiring

  function onFilterChange() {
    state.filters.status = dom.filterStatus.value;
    state.filters.agent = dom.filterAgent.value;
    state.filters.text = dom.filterText.value.toLowerCase();
    dirty.structure = true;
    scheduleFrame();
  }

  function onScroll() {
    state.scrollTop = dom.tree.scrollTop;
    dirty.rows = true;
    scheduleFrame();
  }

  // Ages and countdowns move every second: re-render the visible rows only.
  function tick() {
    if (view.ids.length === 0) return;
    dirty.rows = true;
    scheduleFrame();
  }

  function wireEvents() {
    dom.tree.addEventListener("click", onTreeClick);
    dom.tree.addEventListener("scroll", onScroll, { passive: true });
    dom.sessions.addEventListener("click", onSessionsInput);
    dom.sessions.addEventListener("keydown", onSessionsInput);
    for (const filter of [dom.filterStatus, dom.filterAgent]) filter.addEventListener("change", onFilterChange);
    dom.filterText.addEventListener("input", onFilterChange);
    dom.cancelSession.addEventListener("click", cancelSession);
    dom.detailsClose.addEventListener("click", () => selectTask(null));
    dom.confirmYes.addEventListener("click", () => dom.confirm.close("yes"));
    dom.confirmNo.addEventListener("click", () => dom.confirm.close("no"));
    dom.tokenCancel.addEventListener("click", () => dom.tokenDialog.close(""));
    window.addEventListener("hashchange", () => {
      const id = sessionFromHash();
      if (id !== null) chooseSession(id);
    });
    new ResizeObserver(() => {
      state.viewportHeight = dom.tree.clientHeight;
      dirty.rows = true;
      scheduleFrame();
    }).observe(dom.tree);
    setInterval(tick, 1000);
  }

  function init() {
    state.selected = sessionFromHash();
    state.viewportHeight = dom.tree.clientHeight;
    wireEvents();
    setupChart();
    resetSessionView();
    // Listing first lets the stream open with a session already chosen.
    loadSessions().finally(() => {
      if (!stream.controller) connectStream();
    });
  }

  init();
})();
