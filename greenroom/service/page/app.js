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

function timeCell(seconds, tag = "td") {
  const cell = el(tag, ago(seconds));
  if (seconds) { cell.title = dateOf(seconds); cell.dataset.at = String(seconds); }
  return cell;
}

function stateCell(status) {
  return el("td", status, { class: "state", "data-status": status });
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
    $("problem").textContent = "";
  } catch (failure) {
    if (failure.status === 401) showLogin("The token is no longer valid.");
    else $("problem").textContent = `Could not refresh: ${failure.message}`;
  } finally {
    refreshing = false;
  }
}

function showStatus(status) {
  lastStatus = status;
  $("about").textContent = `version ${status.version} · up ${Math.round(status.uptime)} s` +
    (status.stopping ? " · stopping" : "");
  const counts = $("counts");
  counts.replaceChildren();
  for (const state of STATES) {
    const n = status.tasks.by_status[state] || 0;
    const box = el("div", null, { class: "count", "data-status": state, role: "listitem" });
    box.append(el("span", n, { class: "n" }), el("span", state));
    box.setAttribute("aria-label", `${n} ${state}`);
    counts.append(box);
  }
  const agents = $("agents").tBodies[0];
  agents.replaceChildren();
  for (const [type, a] of Object.entries(status.agents)) {
    const tr = row([type, `${a.alive}/${a.configured}`, a.busy, a.queued, a.restarts, a.tokens_spent, a.cost]);
    tr.dataset.type = type;
    agents.append(tr);
  }
  const mailboxes = $("mailboxes").tBodies[0];
  mailboxes.replaceChildren();
  for (const [name, depth] of Object.entries(status.mailboxes)) mailboxes.append(row([name, depth]));
  const spend = $("spend").tBodies[0];
  spend.replaceChildren();
  let tokens = 0, cost = 0;
  for (const a of Object.values(status.agents)) { tokens += a.tokens_spent; cost += a.cost; }
  spend.append(row(["agents' tokens", tokens]), row(["agents' cost", cost.toFixed(4)]));
  for (const [name, b] of Object.entries(status.budgets || {})) {
    const limits = [b.limit !== null ? `${b.limit} tokens` : null, b.cost_limit !== null ? `a cost of ${b.cost_limit}` : null]
      .filter(Boolean).join(" and ");
    const spent = `${b.tokens} tokens and a cost of ${b.cost} spent` + (limits ? ` of ${limits}` : " (no limit set)");
    const tr = row([`budget ${name}`, spent + (b.exhausted ? " — exhausted" : "")]);
    tr.dataset.budget = name;
    spend.append(tr);
  }
  if (status.chat) {
    for (const name of ["llm_calls", "total_tokens", "cost"]) {
      if (name in status.chat) spend.append(row([`chat ${name.replace("_", " ")}`, status.chat[name]]));
    }
  }
}

function showApprovals(tasks) {
  const list = $("approvals");
  list.replaceChildren();
  $("no-approvals").hidden = tasks.length > 0;
  for (const task of tasks) {
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
    list.append(item);
  }
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
  const body = $("tasks").tBodies[0];
  body.replaceChildren();
  for (const task of page.tasks) {
    const tr = row([task.id, task.type, stateCell(task.status), task.attempt, task.owner || "", timeCell(task.updated_at)]);
    tr.dataset.task = task.id;
    tr.tabIndex = 0;   // reachable from the keyboard: Enter opens it
    tr.setAttribute("aria-label", `${task.id}, ${task.type}, ${task.status}`);
    tr.addEventListener("click", () => showTask(task.id, true));
    tr.addEventListener("keydown", (event) => { if (event.key === "Enter") showTask(task.id, true); });
    body.append(tr);
  }
  if (!page.tasks.length) {
    const empty = $("filter-status").value || narrowed()
      ? "No task matches this filter." : "No tasks yet: submit some (greenroom tasks add, or POST /v1/tasks).";
    body.append(row([el("td", empty, { colspan: "6", class: "empty" })]));
  }
  nextCursor = page.next;
  $("next-page").disabled = nextCursor === null;
  $("page-count").textContent = pageCount();
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
  $("task-section").hidden = false;
  $("task-id").textContent = task.id;
  const fields = $("task-fields");
  fields.replaceChildren();
  const final = FINAL.includes(task.status);
  const shown = {
    type: task.type, owner: task.owner || "—",
    attempt: `${task.attempt} of ${task.max_attempts}`,
    created: when(task.created_at), updated: when(task.updated_at),
    [final ? "took" : "age"]: task.created_at
      ? duration(Math.max(0, (final ? task.updated_at : Date.now() / 1000) - task.created_at)) : "—",
    error: task.error ? task.error.reason || JSON.stringify(task.error) : "—",
  };
  if (task.waiting) {
    shown["waiting on"] = `${task.waiting.tool} ${JSON.stringify(task.waiting.arguments)}`;
    if (task.waiting.since) shown["waiting for a person"] = duration(Math.max(0, Date.now() / 1000 - task.waiting.since));
  }
  fields.append(el("dt", "state"), el("dd", task.status, { "data-status": task.status, id: "task-state" }));
  for (const [name, value] of Object.entries(shown)) fields.append(el("dt", name), el("dd", value));
  $("task-retry").hidden = !["FAILED", "DEPENDENCY_FAILED"].includes(task.status);
  $("task-cancel").hidden = final;
  $("task-result-summary").textContent = task.result ? `${task.result.outcome} (show the whole result)` : "no result";
  $("task-result-json").textContent = task.result ? JSON.stringify(task.result, null, 2) : "";
  const retries = $("task-retries");
  retries.replaceChildren();
  $("no-retries").hidden = (task.retries || []).length > 0;
  for (const r of task.retries || []) {
    retries.append(el("li", `${when(r.at)} by ${r.by}${r.reason ? `: ${r.reason}` : ""} (was ${r.status}, attempt ${r.attempt})`));
  }
  $("task-input").textContent = JSON.stringify(task.input, null, 2);
  const drawn = `${task.id}@${task.updated_at}`;
  if (opened || drawn !== drawnTask || Date.now() - drawnAt > 5000) {   // its neighbours change too
    drawnTask = drawn;
    drawnAt = Date.now();
    if (opened) $("task-heading").focus();
    await Promise.all([showTaskEvents(task), showTaskSteps(taskId), showNeighbours(task)]);
  }
}

const FINAL = ["COMPLETED", "FAILED", "CANCELLED", "DEPENDENCY_FAILED"];

// -- a task's neighbours: links, and a small graph of them (upstream left, downstream right)

function openLink(id, link) {
  link.addEventListener("click", (event) => { event.preventDefault(); showTask(id, true); });
  return link;
}

function taskLinks(list, none, ids) {
  list.replaceChildren();
  none.hidden = ids.length > 0;
  for (const id of ids) {
    const item = el("li");
    item.append(openLink(id, el("a", id, { href: `#task=${encodeURIComponent(id)}`, "data-task": id })));
    list.append(item);
  }
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
  if (shownTask !== taskId) return;
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
  list.replaceChildren();
  svg.replaceChildren();
  $("no-attempts").hidden = attempts.length > 0;
  const now = Date.now() / 1000;
  // how long it was queued before its first attempt (or has been, while none began)
  $("task-queued").textContent = !task.created_at ? ""
    : attempts.length ? `Queued ${duration(Math.max(0, attempts[0].start - task.created_at))} before its first attempt.`
    : task.status === "PENDING" ? `Queued for ${duration(Math.max(0, now - task.created_at))} so far.` : "";
  if (!attempts.length) return;
  const first = Math.min(task.created_at || attempts[0].start, attempts[0].start);
  const last = Math.max(FINAL.includes(task.status) ? task.updated_at : now, ...attempts.map((a) => a.end || now));
  const span = Math.max(1e-3, last - first);
  svg.append(svgEl("line", { x1: 5, x2: 555, y1: 10, y2: 10, class: "life" }));
  for (const a of attempts) {
    const took = (a.end || now) - a.start;
    const said = `attempt ${a.attempt} by ${a.agent}: ${a.outcome}${a.reason ? ` (${a.reason})` : ""}, ` +
      `${a.end ? "took" : "running for"} ${duration(took)}`;
    const x = 5 + (550 * (a.start - first)) / span;
    const bar = svgEl("rect", { x: x.toFixed(1), y: 3, height: 14, width: Math.max(2, (550 * took) / span).toFixed(1),
      class: "attempt", "data-outcome": a.outcome.split(",")[0] });
    bar.append(svgEl("title", {}, said));
    svg.append(bar);
    const item = el("li", said, { "data-attempt": a.attempt, "data-agent": a.agent, "data-outcome": a.outcome });
    item.title = `began ${dateOf(a.start)}` + (a.end ? `, ended ${dateOf(a.end)}` : "");
    list.append(item);
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
  if (shownTask !== taskId) return;
  list.replaceChildren();
  $("no-steps").hidden = steps.length > 0;
  for (const step of steps) list.append(stepItem(step));
}

async function showTaskEvents(task) {
  const taskId = task.id;
  const list = $("task-events");
  const query = new URLSearchParams({ task: taskId, follow: "0" });
  const response = await fetch(`/v1/events?${query}`, { headers: { Authorization: `Bearer ${token}` } });
  if (!response.ok) return;
  const text = await response.text();
  if (shownTask !== taskId) return;
  const events = parseEvents(text).events;
  list.replaceChildren();
  for (const event of events) list.append(eventItem(event));
  showAttempts(task, events);
}

function eventItem(event) {
  const text = `#${event.seq} ${dateOf(event.ts)} ${event.type} ${event.task_id || ""} ${event.agent_id || ""}`;
  return el("li", text, { "data-type": event.type, "data-task": event.task_id || "" });
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
          if (shownTask && event.task_id === shownTask) $("task-events").append(eventItem(event));
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
