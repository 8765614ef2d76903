/*
 * What the user does: cancel a task or the session (confirmed first), filter, select, scroll, and the
 * events that wire each to the page.
 */
import { setupChart } from "./chart.js";
import {
  chooseSession,
  onSessionsInput,
  resetSessionView,
  scheduleFrame,
  sessionFromHash,
  showMessage,
} from "./render.js";
import { CANCEL_REASON, dirty, dom, isolate, models, plural, query, state } from "./state.js";
import { api, connectStream, loadSessions, stream } from "./stream.js";
import { onTreeClick, selectTask, view } from "./tree_view.js";

// ---------------------------------------------------------------- actions

export async function cancelTask(taskId) {
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
export function pendingInSelectedSession() {
  if (state.loaded) return models.shown.pending.size;
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

export function init() {
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
