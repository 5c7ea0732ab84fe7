// greenroom's status page: plain JavaScript, no build step, no third-party code.
// The token lives in this tab's sessionStorage and goes only in the Authorization
// header, never in a URL. Everything shown is set with textContent (no HTML from data).
"use strict";

const STATES = ["PENDING", "IN_PROGRESS", "WAITING", "COMPLETED", "FAILED", "CANCELLED", "DEPENDENCY_FAILED"];
const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("greenroom-token");
let refreshing = false;
let pageCursor = null;    // where the tasks table's page starts: after this order (oldest first) or before it
let pageIndex = 1;        // which page that is (1: the first)
let lastStatus = null;    // the last /v1/status document (its counts give the page count)
let nextCursor = null;    // the next page's start, when there is one
let shownTask = null;     // the task whose details are open (set at the click: a late answer about another is dropped)
let headedTask = null;    // the task whose id the view's heading shows: only its details are ever drawn under it
let drawnTask = null;     // "id@updated_at" of the task whose attempts, steps and neighbours are drawn
let drawnAt = 0;          // when they were (Date.now()): redrawn every 5 s, for what changes around the task
let bulkPreview = null;   // the bulk decision last previewed: what Apply sends
let stream = null;        // the live events' AbortController

class ApiFailure extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    cache: "no-store",
  });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiFailure(response.status, body);
  return body;
}

function el(tag, text, attributes = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

function row(cells) {
  const tr = el("tr");
  for (const cell of cells) tr.append(cell instanceof Node ? cell : el("td", cell));
  return tr;
}

// -- redrawing only what changed ---------------------------------------------------------
// The page refreshes every second. What a person is doing on it — the keyboard focus, the
// scroll position, a text selection — lives in nodes, so a refresh keeps every node whose
// thing is still shown and changes only the text that changed.

function setText(node, text) {
  const value = text === undefined || text === null ? "" : String(text);
  if (node.textContent !== value) node.textContent = value;   // the same text: the node (and a selection in it) stays
}

function setAttr(node, name, value) {
  if (value === null || value === undefined) { if (node.hasAttribute(name)) node.removeAttribute(name); }
  else if (node.getAttribute(name) !== String(value)) node.setAttribute(name, String(value));
}

// One child of `parent` per item, in order, found by `keyOf(item)`: a child whose key is
// still there is updated in place (`update`), a new one made (`make`, then `update`), one
// whose key is gone removed. A child moves only when it is out of place, and the element
// that had the focus gets it back if a move took it.
function sync(parent, items, keyOf, make, update) {
  const active = document.activeElement;
  const focused = active && active !== document.body && parent.contains(active) ? active : null;
  const old = new Map();
  for (const child of [...parent.children]) old.set(child.dataset.syncKey, child);
  let at = parent.firstElementChild;
  for (const item of items) {
    const key = String(keyOf(item));
    let node = old.get(key);
    if (node) old.delete(key);
    else { node = make(item); node.dataset.syncKey = key; }
    update(node, item);
    if (node === at) at = at.nextElementSibling;
    else parent.insertBefore(node, at);
  }
  for (const node of old.values()) node.remove();
  if (focused && focused.isConnected && document.activeElement !== focused) focused.focus({ preventScroll: true });
}

// A table body's rows: each `{key, cells}`, a cell a text or `{text, title, attrs}`.
function syncRows(body, rows) {
  sync(body, rows, (r) => r.key, (r) => {
    const tr = el("tr");
    for (let i = 0; i < r.cells.length; i++) tr.append(el("td"));
    return tr;
  }, (tr, r) => r.cells.forEach((cell, i) => fillCell(tr.cells[i], cell)));
}

function fillCell(td, cell) {
  const spec = cell !== null && typeof cell === "object" ? cell : { text: cell };
  setText(td, spec.text);
  setAttr(td, "title", spec.title);
  for (const [name, value] of Object.entries(spec.attrs || {})) setAttr(td, name, value);
}

// Times: how long ago (what a person reads), the date and time on hover (what they check).
function ago(seconds) {
  if (!seconds) return "";
  const past = Math.max(0, Date.now() / 1000 - seconds);
  if (past < 5) return "just now";
  return `${duration(past)} ago`;
}

function duration(seconds) {
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
  return `${Math.floor(seconds / 86400)} d ${Math.floor((seconds % 86400) / 3600)} h`;
}

function dateOf(seconds) {
  const at = new Date(seconds * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ` +
    `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`;
}

function when(seconds) {
  return seconds ? `${ago(seconds)} (${dateOf(seconds)})` : "";
}

function timeSpec(seconds) {
  return seconds ? { text: ago(seconds), title: dateOf(seconds), attrs: { "data-at": String(seconds) } } : { text: "" };
}

// -- logging in and out ------------------------------------------------------------------

function showLogin(message) {
  token = null;
  sessionStorage.removeItem("greenroom-token");
  if (stream) stream.abort();
  stream = null;
  $("dashboard").hidden = true;
  $("task-section").hidden = true;
  shownTask = null;
  headedTask = null;
  drawnTask = null;
  bulkPreview = null;
  $("task-fields").replaceChildren();
  for (const id of ["task-input", "task-id", "task-queued", "about", "problem", "notice-text", "bulk-shown", "task-result-summary",
    "task-result-json", "page-count", "find-id", "filter-text", "filter-owner", "chart-types-key"]) {
    if ($(id).value !== undefined) $(id).value = ""; else $(id).textContent = "";
  }
  lastStatus = null;
  $("notice").hidden = true;
  $("bulk-apply").hidden = true;
  for (const body of document.querySelectorAll(
    "#dashboard tbody, #counts, #approvals, #events, #task-events, #task-steps, #task-upstream, #task-downstream, " +
    "#task-retries, #task-attempts, #task-timeline, #task-graph, .charts svg"))
    body.replaceChildren();
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

async function logIn(candidate) {
  token = candidate;
  try {
    await api("/v1/status");
  } catch (failure) {
    const why = failure.status === 401 ? "That token is not valid."
      : failure.status === 403 ? "That token may not read tasks (it needs the tasks or admin scope)."
      : `The daemon did not answer (${failure.message}).`;
    showLogin(why);
    return;
  }
  sessionStorage.setItem("greenroom-token", candidate);
  $("login").hidden = true;
  $("dashboard").hidden = false;
  await refresh();
  follow();
}

// -- what the page shows ----------------------------------------------------------------

async function refresh() {
  if (!token || refreshing) return;
  refreshing = true;
  try {
    const [status, approvals] = await Promise.all([
      api("/v1/status"),
      api("/v1/tasks?status=WAITING&limit=50"),
    ]);
    showStatus(status);
    showApprovals(approvals.tasks);
    await showHistory();
    await showTasks();
    if (shownTask) await showTask(shownTask, false);
    setText($("problem"), "");
  } catch (failure) {
    if (failure.status === 401) showLogin("The token is no longer valid.");
    else $("problem").textContent = `Could not refresh: ${failure.message}`;
  } finally {
    refreshing = false;
  }
}

function showStatus(status) {
  lastStatus = status;
  setText($("about"), `version ${status.version} · up ${Math.round(status.uptime)} s` + (status.stopping ? " · stopping" : ""));
  sync($("counts"), STATES, (state) => state, (state) => {
    const box = el("div", null, { class: "count", "data-status": state, role: "listitem" });
    box.append(el("span", "", { class: "n" }), el("span", state));
    return box;
  }, (box, state) => {
    const n = status.tasks.by_status[state] || 0;
    setText(box.firstElementChild, n);
    setAttr(box, "aria-label", `${n} ${state}`);
  });
  syncRows($("agents").tBodies[0], Object.entries(status.agents).map(([type, a]) => ({
    key: type, cells: [type, `${a.alive}/${a.configured}`, a.busy, a.queued, a.restarts, a.tokens_spent, a.cost] })));
  for (const tr of $("agents").tBodies[0].rows) setAttr(tr, "data-type", tr.dataset.syncKey);
  syncRows($("mailboxes").tBodies[0], Object.entries(status.mailboxes).map(([name, depth]) => ({ key: name, cells: [name, depth] })));
  let tokens = 0, cost = 0;
  for (const a of Object.values(status.agents)) { tokens += a.tokens_spent; cost += a.cost; }
  const spend = [{ key: "agents-tokens", cells: ["agents' tokens", tokens] }, { key: "agents-cost", cells: ["agents' cost", cost.toFixed(4)] }];
  for (const [name, b] of Object.entries(status.budgets || {})) {
    const limits = [b.limit !== null ? `${b.limit} tokens` : null, b.cost_limit !== null ? `a cost of ${b.cost_limit}` : null]
      .filter(Boolean).join(" and ");
    const spent = `${b.tokens} tokens and a cost of ${b.cost} spent` + (limits ? ` of ${limits}` : " (no limit set)");
    spend.push({ key: `budget:${name}`, budget: name, cells: [`budget ${name}`, spent + (b.exhausted ? " — exhausted" : "")] });
  }
  if (status.chat) {
    for (const name of ["llm_calls", "total_tokens", "cost"]) {
      if (name in status.chat) spend.push({ key: `chat:${name}`, cells: [`chat ${name.replace("_", " ")}`, status.chat[name]] });
    }
  }
  syncRows($("spend").tBodies[0], spend);
  for (const tr of $("spend").tBodies[0].rows) {
    if (tr.dataset.syncKey.startsWith("budget:")) setAttr(tr, "data-budget", tr.dataset.syncKey.slice(7));
  }
}

function showApprovals(tasks) {
  $("no-approvals").hidden = tasks.length > 0;
  // a waiting call is drawn once: the same call keeps its node (and the focus on its buttons)
  sync($("approvals"), tasks, (task) => `${task.id} ${JSON.stringify(task.waiting || {})}`, (task) => {
    const call = task.waiting || {};
    const item = el("li", null, { "data-task": task.id });
    item.append(
      el("strong", `${task.id} (${task.type})`),
      el("div", `asks to run ${call.tool} (risk ${call.risk || "?"}) with`),
      el("pre", JSON.stringify(call.arguments, null, 2)),
    );
    const approve = el("button", "Approve", { type: "button", class: "approve", "aria-label": `Approve ${task.id}` });
    const deny = el("button", "Deny", { type: "button", class: "deny", "aria-label": `Deny ${task.id}` });
    approve.addEventListener("click", () => decide(task.id, "approve"));
    deny.addEventListener("click", () => decide(task.id, "deny"));
    item.append(approve, " ", deny);
    return item;
  }, () => {});
}

// A refusal or a result a person must read stays until dismissed: the refresh never clears it.
function notice(text) {
  $("notice-text").textContent = text;
  $("notice").hidden = false;
}

// Approve or deny one waiting call, after a confirmation that names it.
async function decide(taskId, verb) {
  const question = verb === "approve"
    ? `Approve ${taskId}? Its call runs, recorded as your decision.`
    : `Deny ${taskId}? Its call does not run; the agent is told no, recorded as your decision.`;
  if (!window.confirm(question)) return;
  try {
    const body = verb === "deny" ? { reason: "denied on the status page" } : {};
    await api(`/v1/tasks/${encodeURIComponent(taskId)}/${verb}`, { method: "POST", body: JSON.stringify(body) });
  } catch (failure) {
    if (failure.status === 401) { showLogin("The token is no longer valid."); return; }
    notice(`Could not ${verb} ${taskId}: ${failure.message}`);
  }
  await refresh();
}

function bulkRequest(dryRun) {
  const filter = {};
  if ($("bulk-type").value.trim()) filter.type = $("bulk-type").value.trim();
  if ($("bulk-tool").value.trim()) filter.tool = $("bulk-tool").value.trim();
  if ($("bulk-may-have-run").checked) filter.may_have_run = true;
  const verdict = $("bulk-verdict").value;
  return {
    filter, approve: verdict !== "deny", as_done: verdict === "done",
    reason: $("bulk-reason").value, dry_run: dryRun,
  };
}

async function bulkPreviewed() {
  const request = bulkRequest(true);
  try {
    const answer = await api("/v1/tasks/decide", { method: "POST", body: JSON.stringify(request) });
    const ids = answer.matched.map((call) => call.id);
    const said = request.as_done ? "recorded as done" : request.approve ? "approved" : "denied";
    $("bulk-shown").textContent = ids.length
      ? `${ids.length} call(s) would be ${said}: ${ids.join(", ")}`
      : "No waiting call matches.";
    bulkPreview = ids.length ? { ...request, dry_run: false, count: ids.length } : null;
    $("bulk-apply").hidden = bulkPreview === null;
    if (bulkPreview) $("bulk-apply").textContent = `Apply to ${ids.length}`;
  } catch (failure) {
    bulkPreview = null;
    $("bulk-apply").hidden = true;
    notice(`Could not preview: ${failure.message}`);
  }
}

async function bulkApplied() {
  if (!bulkPreview) return;
  const { count, ...request } = bulkPreview;
  if (!window.confirm(`Decide ${count} waiting call(s)? Each is recorded as a single decision.`)) return;
  bulkPreview = null;
  $("bulk-apply").hidden = true;
  $("bulk-shown").textContent = "";
  try {
    const answer = await api("/v1/tasks/decide", { method: "POST", body: JSON.stringify(request) });
    const refused = answer.refused.map((r) => `${r.id}: ${r.error}`).join("; ");
    notice(`Decided ${answer.decided.length} of ${answer.matched.length}` + (refused ? `; refused ${refused}` : ""));
  } catch (failure) {
    notice(`Could not decide: ${failure.message}`);
  }
  await refresh();
}

// -- over time: the daemon's samples (GET /v1/history) as small SVG line charts ----------

const SVG = "http://www.w3.org/2000/svg";
const COLOURS = { completed: "#1f63b4", failed: "#c62828", pending: "#d66818", in_progress: "#1f63b4",
  waiting: "#9a6700", first_token_p50_ms: "#2c963c", first_token_p99_ms: "#1f63b4", tokens_per_second_p50: "#d66818" };
const PALETTE = ["#1f63b4", "#d66818", "#2c963c", "#8246aa", "#c62828"];

async function showHistory() {
  let history;
  try {
    history = await api("/v1/history");
  } catch (failure) {
    if (failure.status === 404) { $("history-section").hidden = true; return; }
    throw failure;
  }
  const samples = history.samples;
  $("no-history").hidden = samples.length >= 2;
  const rates = [];
  for (let i = 1; i < samples.length; i++) {
    const minutes = Math.max(1e-9, (samples[i].at - samples[i - 1].at) / 60);
    rates.push({ at: samples[i].at,
      completed: Math.max(0, samples[i].completed - samples[i - 1].completed) / minutes,
      failed: Math.max(0, samples[i].failed - samples[i - 1].failed) / minutes });
  }
  chart($("chart-finished"), rates, ["completed", "failed"]);
  chart($("chart-queue"), samples, ["pending", "in_progress", "waiting"]);
  chart($("chart-latency"), samples, ["first_token_p50_ms", "first_token_p99_ms", "tokens_per_second_p50"]);
  // each agent type's queue: its series named "type:<name>" (a type may be called anything, "at" too)
  const types = [...new Set(samples.flatMap((s) => Object.keys(s.queued_by_type || {})))].sort();
  const queues = samples.map((s) => {
    const point = { at: s.at };
    for (const name of types) point[`type:${name}`] = (s.queued_by_type || {})[name] ?? null;
    return point;
  });
  const typeSeries = types.map((name) => `type:${name}`);
  chart($("chart-types"), queues, typeSeries);
  const key = $("chart-types-key");
  key.replaceChildren();
  typeSeries.forEach((series, index) => {
    if (index) key.append(", ");
    const swatch = document.createElementNS(SVG, "svg");
    swatch.setAttribute("viewBox", "0 0 10 10");
    swatch.setAttribute("class", "swatch");
    swatch.setAttribute("aria-hidden", "true");
    const square = document.createElementNS(SVG, "rect");
    for (const [name, value] of [["width", "10"], ["height", "10"], ["fill", PALETTE[index % PALETTE.length]]])
      square.setAttribute(name, value);
    swatch.append(square);
    key.append(swatch, el("span", types[index], { "data-series": series }));
  });
  if (!types.length) key.textContent = "no tasks yet";
  const names = [...new Set(samples.flatMap((s) => Object.keys(s.budgets || {})))];
  const spent = samples.map((s) => {
    const point = { at: s.at };
    for (const name of names) {
      const b = (s.budgets || {})[name];
      point[name] = b ? (b.limit ? (100 * b.tokens) / b.limit : b.tokens) : null;
    }
    return point;
  });
  chart($("chart-budgets"), spent, names);
}

// One line per series over the samples' time (x), from 0 to the largest value (y). What a
// screen reader hears: the chart's name and each series' last value.
function chart(svg, points, series) {
  svg.replaceChildren();
  if (!svg.dataset.label) svg.dataset.label = svg.getAttribute("aria-label");
  const last = points[points.length - 1] || {};
  const said = series.filter((name) => typeof last[name] === "number")
    .map((name) => `${name.replace(/^type:/, "")} ${Number(last[name].toPrecision(3))}`);
  svg.setAttribute("aria-label", svg.dataset.label + (said.length ? `, now: ${said.join(", ")}` : ", no samples yet"));
  const values = points.flatMap((p) => series.map((name) => p[name])).filter((v) => typeof v === "number");
  if (points.length < 2 || !values.length) {   // an empty chart says why
    svg.append(svgEl("text", { x: 150, y: 60, "text-anchor": "middle", class: "nothing" },
      points.length < 2 ? "waiting for samples" : "nothing measured yet"));
    return;
  }
  const top = Math.max(...values, 1), first = points[0].at, span = Math.max(1e-9, points[points.length - 1].at - first);
  const axis = document.createElementNS(SVG, "path");
  axis.setAttribute("d", "M30 5 V105 H295");
  axis.setAttribute("stroke", "#bbb");
  axis.setAttribute("fill", "none");
  svg.append(axis);
  const label = document.createElementNS(SVG, "text");
  label.setAttribute("x", "2");
  label.setAttribute("y", "12");
  label.setAttribute("font-size", "9");
  label.textContent = top >= 100 ? String(Math.round(top)) : top.toPrecision(2);
  svg.append(label);
  series.forEach((name, index) => {
    const coords = points.filter((p) => typeof p[name] === "number")
      .map((p) => `${(30 + (265 * (p.at - first)) / span).toFixed(1)},${(105 - (100 * p[name]) / top).toFixed(1)}`);
    if (!coords.length) return;
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", coords.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke-width", "1.5");
    line.setAttribute("stroke", COLOURS[name] || PALETTE[index % PALETTE.length]);
    line.dataset.series = name;
    const title = document.createElementNS(SVG, "title");
    title.textContent = name.replace(/^type:/, "");
    line.append(title);
    svg.append(line);
  });
}

// The tasks table's query: the filter's fields, the order, and where the page starts.
function listingQuery() {
  const newest = $("filter-order").value === "newest";
  const query = new URLSearchParams({ limit: "20", order: newest ? "newest" : "oldest" });
  if (pageCursor !== null) query.set(newest ? "before" : "after", String(pageCursor));
  for (const [name, id] of [["status", "filter-status"], ["type", "filter-type"], ["owner", "filter-owner"],
    ["q", "filter-text"], ["updated_within", "filter-within"]]) {
    const value = $(id).value.trim();
    if (value) query.set(name, value);
  }
  if ($("filter-archived").checked) query.set("archived", "1");
  return query;
}

// Whether a filter beyond the state is set (the status counts cannot say how many match it).
function narrowed() {
  return ["filter-type", "filter-owner", "filter-text", "filter-within"].some((id) => $(id).value.trim())
    || $("filter-archived").checked;
}

async function showTasks() {
  const page = await api(`/v1/tasks?${listingQuery()}`);
  const rows = page.tasks.map((task) => ({ key: task.id, task }));
  if (!rows.length) {
    const empty = $("filter-status").value || narrowed()
      ? "No task matches this filter." : "No tasks yet: submit some (greenroom tasks add, or POST /v1/tasks).";
    rows.push({ key: " empty", empty });
  }
  sync($("tasks").tBodies[0], rows, (r) => r.key, taskRow, fillTaskRow);
  nextCursor = page.next;
  $("next-page").disabled = nextCursor === null;
  setText($("page-count"), pageCount());
}

function taskRow(r) {
  if (r.empty !== undefined) return row([el("td", "", { colspan: "6", class: "empty" })]);
  const id = r.task.id;
  const tr = row(["", "", el("td", "", { class: "state" }), "", "", ""]);
  tr.dataset.task = id;
  tr.tabIndex = 0;   // reachable from the keyboard: Enter opens it
  tr.addEventListener("click", () => showTask(id, true));
  tr.addEventListener("keydown", (event) => { if (event.key === "Enter") showTask(id, true); });
  return tr;
}

function fillTaskRow(tr, r) {
  if (r.empty !== undefined) { setText(tr.cells[0], r.empty); return; }
  const task = r.task;
  [task.id, task.type, { text: task.status, attrs: { "data-status": task.status } }, task.attempt, task.owner || "",
    timeSpec(task.updated_at)].forEach((cell, i) => fillCell(tr.cells[i], cell));
  setAttr(tr, "aria-label", `${task.id}, ${task.type}, ${task.status}`);
}

// "page N of M" where the status counts say how many tasks the filter has (a state or
// none: not by type, owner, text or time, not archived); "page N" otherwise.
function pageCount() {
  const status = $("filter-status").value;
  if (!lastStatus || narrowed()) return `page ${pageIndex}`;
  const total = status ? (lastStatus.tasks.by_status[status] || 0) : lastStatus.tasks.total;
  return `page ${pageIndex} of ${Math.max(1, Math.ceil(total / 20))}`;
}

function firstPage() {
  pageCursor = null;
  pageIndex = 1;
  refresh();
}

// A task opened (``opened``: by a person's click, a link or a search: the view takes the
// focus) or redrawn by the refresh. Its attempts, steps and neighbours are fetched again
// when it is opened, whenever it changed since they were drawn, and every 5 s.
async function showTask(taskId, opened) {
  if (opened) shownTask = taskId;   // from now on only this task's answers are shown
  const task = await api(`/v1/tasks/${encodeURIComponent(taskId)}`);
  if (shownTask !== taskId || !token) return;   // another was chosen (or the page logged out) meanwhile
  if (headedTask !== task.id) {   // another task's details go with its heading, before the new one is shown
    clearTaskDetails();
    headedTask = task.id;
    drawnTask = null;
  }
  $("task-section").hidden = false;
  setText($("task-id"), task.id);
  const final = FINAL.includes(task.status);
  const shown = [
    ["state", task.status],
    ["type", task.type], ["owner", task.owner || "—"],
    ["attempt", `${task.attempt} of ${task.max_attempts}`],
    ["created", when(task.created_at)], ["updated", when(task.updated_at)],
    [final ? "took" : "age", task.created_at
      ? duration(Math.max(0, (final ? task.updated_at : Date.now() / 1000) - task.created_at)) : "—"],
    ["error", task.error ? task.error.reason || JSON.stringify(task.error) : "—"],
  ];
  if (task.waiting) {
    shown.push(["waiting on", `${task.waiting.tool} ${JSON.stringify(task.waiting.arguments)}`]);
    if (task.waiting.since) shown.push(["waiting for a person", duration(Math.max(0, Date.now() / 1000 - task.waiting.since))]);
  }
  sync($("task-fields"), shown, ([name]) => name, ([name]) => {
    const pair = el("div");   // a <div> per pair: allowed in a <dl>, laid out as if it were not there
    pair.append(el("dt", name), el("dd", "", name === "state" ? { id: "task-state" } : {}));
    return pair;
  }, (pair, [name, value]) => {
    setText(pair.lastElementChild, value);
    if (name === "state") setAttr(pair.lastElementChild, "data-status", value);
  });
  showActions(task);
  setText($("task-result-summary"), task.result ? `${task.result.outcome} (show the whole result)` : "no result");
  setText($("task-result-json"), task.result ? JSON.stringify(task.result, null, 2) : "");
  $("no-retries").hidden = (task.retries || []).length > 0;
  sync($("task-retries"), task.retries || [], (r) => `${r.at} ${r.by}`, () => el("li"), (item, r) => setText(item,
    `${when(r.at)} by ${r.by}${r.reason ? `: ${r.reason}` : ""} (was ${r.status}, attempt ${r.attempt})`));
  setText($("task-input"), JSON.stringify(task.input, null, 2));
  const drawn = `${task.id}@${task.updated_at}`;
  if (opened || drawn !== drawnTask || Date.now() - drawnAt > 5000) {   // its neighbours change too
    drawnTask = drawn;
    drawnAt = Date.now();
    if (opened) $("task-heading").focus();
    await Promise.all([showTaskEvents(task), showTaskSteps(taskId), showNeighbours(task)]);
  }
}

// What a person may do now, as the daemon says (its `actions`: the rule its store applies):
// an action it refuses is not offered, or — retry, when the task failed — offered disabled,
// saying why.
function showActions(task) {
  const actions = task.actions || {};
  const retry = actions.retry || { allowed: false, why: null };
  const failed = ["FAILED", "DEPENDENCY_FAILED"].includes(task.status);
  const button = $("task-retry");
  button.hidden = !retry.allowed && !failed;
  button.disabled = !retry.allowed;
  setText($("task-retry-why"), retry.allowed || !failed ? "" : `Retry is not possible: ${retry.why}`);
  $("task-retry-why").hidden = retry.allowed || !failed;
  $("task-cancel").hidden = !(actions.cancel && actions.cancel.allowed);
}

// Empty what is drawn of the task shown before (its events, steps, attempts, neighbours):
// a later task's heading never shows an earlier one's details, even for a moment.
function clearTaskDetails() {
  for (const id of ["task-events", "task-steps", "task-attempts", "task-timeline", "task-graph", "task-upstream",
    "task-downstream", "task-retries", "task-fields"]) $(id).replaceChildren();
  for (const id of ["task-queued", "task-input", "task-result-summary", "task-result-json", "task-retry-why"]) setText($(id), "");
  for (const id of ["no-steps", "no-attempts", "no-upstream", "no-downstream", "no-retries"]) $(id).hidden = true;
}

const FINAL = ["COMPLETED", "FAILED", "CANCELLED", "DEPENDENCY_FAILED"];

// -- a task's neighbours: links, and a small graph of them (upstream left, downstream right)

function openLink(id, link) {
  link.addEventListener("click", (event) => { event.preventDefault(); showTask(id, true); });
  return link;
}

function taskLinks(list, none, ids) {
  none.hidden = ids.length > 0;
  sync(list, ids, (id) => id, (id) => {
    const item = el("li");
    item.append(openLink(id, el("a", id, { href: `#task=${encodeURIComponent(id)}`, "data-task": id })));
    return item;
  }, () => {});
}

const SIDE = 8;   // neighbours drawn each side; the rest are in the lists below the graph
const WIDTH = 150;   // a node's width: the columns at 5, 205 and 405 leave room for the edges

async function showNeighbours(task) {
  const taskId = task.id;
  let dependents = [];
  try {
    dependents = (await api(`/v1/tasks/${encodeURIComponent(taskId)}/dependents`)).dependents;
  } catch (failure) {
    if (failure.status !== 404) throw failure;   // an archived task: no live dependents
  }
  const upstream = task.depends_on || [];
  const drawnIds = [...upstream.slice(0, SIDE), ...dependents.slice(0, SIDE)];
  const found = await Promise.all(drawnIds.map((id) =>
    api(`/v1/tasks/${encodeURIComponent(id)}`).then((t) => t.status, () => "unknown")));
  if (shownTask !== taskId || headedTask !== taskId) return;
  const statuses = Object.fromEntries(drawnIds.map((id, i) => [id, found[i]]));
  taskLinks($("task-upstream"), $("no-upstream"), upstream);
  taskLinks($("task-downstream"), $("no-downstream"), dependents);
  drawGraph(task, upstream, dependents, statuses);
}

function svgEl(tag, attributes = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function drawGraph(task, upstream, downstream, statuses) {
  const svg = $("task-graph");
  const active = document.activeElement;
  const focused = active && svg.contains(active) ? active.dataset.task : null;   // redrawn: the same node keeps the focus
  svg.replaceChildren();
  const rowsOf = (ids) => Math.min(ids.length, SIDE) + (ids.length > SIDE ? 1 : 0);
  const rows = Math.max(1, rowsOf(upstream), rowsOf(downstream));
  const height = rows * 30 + 6, middle = (height - 22) / 2;
  svg.setAttribute("viewBox", `0 0 560 ${height}`);
  const node = (x, y, id, status, current) => {
    const short = id.length > 19 ? `${id.slice(0, 18)}…` : id;
    const group = current
      ? svgEl("g", { "data-status": status, class: "node current" })
      : openLink(id, svgEl("a", { href: `#task=${encodeURIComponent(id)}`, "data-task": id, "data-status": status,
        class: "node", "aria-label": `open ${id} (${status})` }));
    group.append(svgEl("title", {}, `${id} (${status})`), svgEl("rect", { x, y, width: WIDTH, height: 22, rx: 4 }),
      svgEl("text", { x: x + 8, y: y + 15 }, short));
    svg.append(group);
  };
  const edge = (x1, y1, x2, y2) => svg.append(svgEl("path", {
    d: `M${x1} ${y1 + 11} C${x1 + 10} ${y1 + 11} ${x2 - 10} ${y2 + 11} ${x2} ${y2 + 11}`, class: "edge" }));
  const side = (ids, x, towards) => {
    ids.slice(0, SIDE).forEach((id, i) => {
      const y = 3 + i * 30;
      node(x, y, id, statuses[id] || "unknown", false);
      if (towards < x) edge(towards + WIDTH, middle, x, y); else edge(x + WIDTH, y, towards, middle);
    });
    if (ids.length > SIDE) svg.append(svgEl("text", { x: x + 8, y: 3 + SIDE * 30 + 15, class: "more" },
      `and ${ids.length - SIDE} more (listed below)`));
  };
  side(upstream, 5, 205);
  side(downstream, 405, 205);
  node(205, middle, task.id, task.status, true);
  if (focused) {
    const again = [...svg.querySelectorAll("a[data-task]")].find((a) => a.dataset.task === focused);
    if (again) again.focus({ preventScroll: true });
  }
}

// -- a task's attempts, from its events: who claimed it, for how long, how it ended --------

const ENDINGS = { TASK_COMPLETED: "completed", TASK_FAILED: "failed", TASK_CANCELLED: "cancelled",
  TASK_WAITING: "parked for a person", TASK_RETRIED: "ended" };

function attemptsOf(events) {
  const attempts = [];
  let current = null;
  for (const event of events) {
    const payload = event.payload || {};
    if (event.type === "TASK_CLAIMED") {
      current = { attempt: payload.attempt, agent: event.agent_id || "?", start: event.ts, end: null, outcome: "running" };
      attempts.push(current);
    } else if (current && current.end === null && ENDINGS[event.type]) {
      current.end = event.ts;
      current.outcome = ENDINGS[event.type];
      if (event.type === "TASK_RETRIED") current.outcome = payload.reason ? "ended, runs again" : "handed back, runs again";
      current.reason = event.type === "TASK_COMPLETED" ? "" : payload.reason || "";
    }
  }
  return attempts;
}

function showAttempts(task, events) {
  const attempts = attemptsOf(events);
  const list = $("task-attempts"), svg = $("task-timeline");
  svg.replaceChildren();
  $("no-attempts").hidden = attempts.length > 0;
  const now = Date.now() / 1000;
  // how long it was queued before its first attempt (or has been, while none began)
  setText($("task-queued"), !task.created_at ? ""
    : attempts.length ? `Queued ${duration(Math.max(0, attempts[0].start - task.created_at))} before its first attempt.`
    : task.status === "PENDING" ? `Queued for ${duration(Math.max(0, now - task.created_at))} so far.` : "");
  const said = (a) => `attempt ${a.attempt} by ${a.agent}: ${a.outcome}${a.reason ? ` (${a.reason})` : ""}, ` +
    `${a.end ? "took" : "running for"} ${duration((a.end || now) - a.start)}`;
  sync(list, attempts, (a) => `${a.attempt} ${a.start}`, () => el("li"), (item, a) => {
    setText(item, said(a));
    for (const [name, value] of [["data-attempt", a.attempt], ["data-agent", a.agent], ["data-outcome", a.outcome],
      ["title", `began ${dateOf(a.start)}` + (a.end ? `, ended ${dateOf(a.end)}` : "")]]) setAttr(item, name, value);
  });
  if (!attempts.length) return;
  const first = Math.min(task.created_at || attempts[0].start, attempts[0].start);
  const last = Math.max(FINAL.includes(task.status) ? task.updated_at : now, ...attempts.map((a) => a.end || now));
  const span = Math.max(1e-3, last - first);
  svg.append(svgEl("line", { x1: 5, x2: 555, y1: 10, y2: 10, class: "life" }));
  for (const a of attempts) {
    const took = (a.end || now) - a.start;
    const x = 5 + (550 * (a.start - first)) / span;
    const bar = svgEl("rect", { x: x.toFixed(1), y: 3, height: 14, width: Math.max(2, (550 * took) / span).toFixed(1),
      class: "attempt", "data-outcome": a.outcome.split(",")[0] });
    bar.append(svgEl("title", {}, said(a)));
    svg.append(bar);
  }
}

// -- a task's step journal: each model call's figures, each tool call folded ----------------

function folded(summary, value) {
  const details = el("details");
  details.append(el("summary", summary), el("pre", JSON.stringify(value, null, 2)));
  return details;
}

function stepItem(step) {
  const item = el("li", null, { "data-kind": step.kind, "data-key": step.key });
  const body = step.body || {};
  const head = el("span", `${step.key} · attempt ${step.attempt} · `, { class: "step-head" });
  if (step.kind === "model") {
    const timing = body.timing || {}, usage = body.usage || {};
    const figures = [
      ["latency", timing.duration !== undefined ? `${Math.round(timing.duration * 1000)} ms` : "latency not measured"],
      ["first-token", timing.first_token !== undefined ? `first token ${Math.round(timing.first_token * 1000)} ms` : null],
      ["tokens", `${(usage.prompt_tokens || 0) + (usage.completion_tokens || 0)} tokens ` +
        `(${usage.prompt_tokens || 0} in, ${usage.completion_tokens || 0} out)`],
      ["cost", typeof body.cost === "number" ? `cost ${Number(body.cost.toPrecision(4))}` : "no price"],
    ].filter(([, text]) => text !== null);
    head.append("model call");
    item.append(head);
    for (const [name, text] of figures) item.append(" · ", el("span", text, { class: name }));
    const calls = (body.tool_calls || []).map((c) => c.name).join(", ");
    item.append(folded(calls ? `the reply (asks for ${calls})` : "the reply", { text: body.text, tool_calls: body.tool_calls,
      finish_reason: body.finish_reason }));
  } else if (step.kind === "tool") {
    const record = body.record || {};
    head.append(`tool ${record.name || "?"} · `);
    item.append(head, el("span", record.ok ? "ok" : `error: ${record.error || "failed"}`, { class: "outcome" }));
    item.append(folded("arguments and result", { arguments: record.arguments, result: record.ok ? record.result : undefined,
      error: record.ok ? undefined : record.error }));
  } else {
    head.append(step.kind.replace("_", " "));
    item.append(head, folded("what was recorded", body));
  }
  return item;
}

async function showTaskSteps(taskId) {
  const list = $("task-steps");
  let steps = [];
  try {
    steps = (await api(`/v1/tasks/${encodeURIComponent(taskId)}/steps`)).steps;
  } catch (failure) {
    if (failure.status !== 404) throw failure;
  }
  if (shownTask !== taskId || headedTask !== taskId) return;
  $("no-steps").hidden = steps.length > 0;
  sync(list, steps, (step) => `${step.attempt} ${step.key}`, stepItem, () => {});   // a step never changes
}

async function showTaskEvents(task) {
  const taskId = task.id;
  const list = $("task-events");
  const query = new URLSearchParams({ task: taskId, follow: "0" });
  const response = await fetch(`/v1/events?${query}`, { headers: { Authorization: `Bearer ${token}` } });
  if (!response.ok) return;
  const text = await response.text();
  if (shownTask !== taskId || headedTask !== taskId) return;
  const events = parseEvents(text).events;
  sync(list, events, (event) => event.seq, eventItem, () => {});   // an event never changes
  showAttempts(task, events);
}

function eventItem(event) {
  const text = `#${event.seq} ${dateOf(event.ts)} ${event.type} ${event.task_id || ""} ${event.agent_id || ""}`;
  return el("li", text, { "data-type": event.type, "data-task": event.task_id || "", "data-sync-key": String(event.seq) });
}

// Cancel and retry: each asks for a confirmation; a refusal stays on screen until read.
async function act(verb) {
  const taskId = shownTask;
  if (!taskId) return;
  const question = verb === "retry"
    ? `Retry ${taskId}? It runs again with a fresh attempt budget, and its dependents wait for it again.`
    : `Cancel ${taskId}? Its dependents can never run either.`;
  if (!window.confirm(question)) return;
  const body = verb === "cancel" ? { reason: "cancelled on the status page" } : { reason: "retried on the status page" };
  try {
    await api(`/v1/tasks/${encodeURIComponent(taskId)}/${verb}`, { method: "POST", body: JSON.stringify(body) });
  } catch (failure) {
    if (failure.status === 401) { showLogin("The token is no longer valid."); return; }
    notice(`Could not ${verb} ${taskId}: ${failure.message}`);
  }
  await refresh();
}

async function find(taskId) {
  try {
    await api(`/v1/tasks/${encodeURIComponent(taskId)}`);   // there is one: only then is it the task shown
    await showTask(taskId, true);
  } catch (failure) {
    if (failure.status === 401) { showLogin("The token is no longer valid."); return; }
    notice(failure.status === 404 ? `No task with id ${taskId}.` : `Could not open ${taskId}: ${failure.message}`);
  }
}

// Server-Sent Events, read with fetch (EventSource cannot send the Authorization header).
function parseEvents(text) {
  const events = [];
  let gone = null;
  for (const block of text.split("\n\n")) {
    let kind = "message", data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) kind = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    if (!data) continue;
    if (kind === "gone") gone = JSON.parse(data);
    else events.push(JSON.parse(data));
  }
  return { events, gone };
}

async function follow() {
  let after = null;
  while (token) {
    const controller = new AbortController();
    stream = controller;
    const query = after === null ? "last=50" : `after=${after}`;
    try {
      const response = await fetch(`/v1/events?${query}`, {
        headers: { Authorization: `Bearer ${token}` }, signal: controller.signal,
      });
      if (response.status === 410) { after = null; continue; }   // fell behind retention: resume at the newest
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        const end = buffer.lastIndexOf("\n\n");
        if (end < 0) continue;
        const { events, gone } = parseEvents(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        const list = $("events");
        for (const event of events) {
          after = event.seq;
          list.prepend(eventItem(event));
          if (headedTask && event.task_id === headedTask) $("task-events").append(eventItem(event));
        }
        while (list.childElementCount > 200) list.lastElementChild.remove();
        if (gone) { after = null; break; }
      }
    } catch (failure) {
      if (controller.signal.aborted) return;
    }
    if (stream !== controller) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));   // reconnect, resuming after the last seen
  }
}

// -- wiring ---------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const candidate = $("token").value.trim();
    $("token").value = "";
    if (candidate) logIn(candidate);
  });
  $("logout").addEventListener("click", () => showLogin(""));
  $("notice-close").addEventListener("click", () => { $("notice").hidden = true; $("notice-text").textContent = ""; });
  $("bulk").addEventListener("submit", (event) => { event.preventDefault(); bulkPreviewed(); });
  $("bulk-apply").addEventListener("click", bulkApplied);
  for (const id of ["bulk-type", "bulk-tool", "bulk-may-have-run", "bulk-verdict", "bulk-reason"])
    $(id).addEventListener("change", () => { bulkPreview = null; $("bulk-apply").hidden = true; });
  $("filter").addEventListener("submit", (event) => { event.preventDefault(); firstPage(); });
  $("failed-hour").addEventListener("click", () => {
    $("filter-status").value = "FAILED";
    $("filter-within").value = "3600";
    $("filter-order").value = "newest";
    firstPage();
  });
  $("filter-clear").addEventListener("click", () => { $("filter").reset(); firstPage(); });
  $("first-page").addEventListener("click", firstPage);
  $("next-page").addEventListener("click", () => {
    if (nextCursor !== null) { pageCursor = nextCursor; pageIndex += 1; refresh(); }
  });
  $("find").addEventListener("submit", (event) => { event.preventDefault(); find($("find-id").value.trim()); });
  $("task-retry").addEventListener("click", () => act("retry"));
  $("task-cancel").addEventListener("click", () => act("cancel"));
  setInterval(refresh, 1000);
  if (token) logIn(token); else showLogin("");
});
