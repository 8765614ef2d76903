/*
 * The server: its API (with the token the page asks for on a 401) and its event stream, whose messages feed
 * the update queue.
 */
import { drawChart } from "./chart.js";
import { renderSessions, selectSession, setConnection, setSessions, showMessage } from "./render.js";
import {
  RECONNECT_MS,
  TOKEN_KEY,
  dom,
  enqueueSnapshot,
  enqueueTasks,
  isolate,
  setText,
  sleep,
  state,
  syncClock,
} from "./state.js";

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

export async function api(path, { method = "GET", body } = {}) {
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

export async function loadSessions() {
  try {
    const data = await api("api/sessions");
    syncClock(data?.now);
    setSessions(data?.sessions);
  } catch (error) {
    showMessage(`Could not list the sessions: ${error.message}`);
  }
}

// ---------------------------------------------------------------- the event stream

export const stream = { controller: null, generation: 0 };

export function connectStream() {
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
