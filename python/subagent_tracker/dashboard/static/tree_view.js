/*
 * The task tree as shown: the filters, the flattened visible rows, the virtualized rows in the DOM, and the
 * details panel of the selected task.
 */
import { cancelTask, pendingInSelectedSession } from "./actions.js";
import { fillSessionItem, scheduleFrame, sessionItems } from "./render.js";
import {
  COLLAPSE_ABOVE,
  DETAIL_KEYS,
  INDENT_PX,
  MAX_INDENT_LEVELS,
  OVERSCAN_ROWS,
  ROW_HEIGHT,
  camel,
  countText,
  dirty,
  dom,
  formatCountdown,
  formatDuration,
  hasDetails,
  hasPendingDescendant,
  hook,
  isPending,
  make,
  models,
  serverNow,
  setLabel,
  setText,
  state,
  statusOf,
} from "./state.js";

// ---------------------------------------------------------------- filters and flattening

// The visible rows, recomputed by flatten().
export let view = { ids: [], depths: [], context: [], matches: 0 };

export const filterActive = () => Boolean(state.filters.status || state.filters.agent || state.filters.text);

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
  const kids = models.shown.children.get(id);
  return filtering || !kids || kids.size <= COLLAPSE_ABOVE || isRoot(models.shown, models.shown.tasks.get(id));
}

/** Recomputes the visible rows in tree order: one O(n) pass, iterative so deep chains cannot overflow. */
export function flatten() {
  const m = models.shown;
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

export function renderAgentFilter() {
  const current = state.filters.agent;
  const options = ["", ...[...models.shown.agents].sort()].map((agent) => {
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
export function renderRows() {
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
  const task = models.shown.tasks.get(id);
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
  const count = models.shown.children.get(id)?.size ?? 0;
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
  else if (models.shown.tasks.size === 0) note = "No tasks in this session yet.";
  else note = "No task matches the filters.";
  setText(dom.treeEmpty, note);
  dom.treeEmpty.hidden = note === "";
}

export function renderCounts() {
  const parts = [];
  if (models.shown.tasks.size) parts.push(countText(models.shown.tasks.size, "tasks"));
  if (models.shown.pending.size) parts.push(countText(models.shown.pending.size, "pending"));
  if (filterActive()) parts.push(countText(view.matches, "matching"));
  setText(dom.treeCount, parts.join(" · "));
  renderSelectedSessionItem();
  renderCancelSession();
}

// Greyed while nothing is pending: on every frame that draws rows, and on every overview before the
// session's tasks have loaded.
export function renderCancelSession() {
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

export function onTreeClick(event) {
  const rowEl = event.target.closest(".task");
  if (!rowEl) return;
  const id = rowEl.dataset.taskId;
  if (event.target.closest(".toggle")) toggleExpanded(id);
  else if (event.target.closest(".cancel")) cancelTask(id);
  else selectTask(id);
}

// ---------------------------------------------------------------- details panel

export function selectTask(id) {
  state.selectedTaskId = id;
  dirty.rows = dirty.details = true;
  scheduleFrame();
}

export function renderDetails() {
  const task = state.selectedTaskId === null ? undefined : models.shown.tasks.get(state.selectedTaskId);
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
