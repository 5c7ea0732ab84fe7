// greenroom's status page: plain JavaScript, no build step, no third-party code.
// The token lives in this tab's sessionStorage and goes only in the Authorization
// header, never in a URL. Everything shown is set with textContent (no HTML from data).
"use strict";

const STATES = ["PENDING", "IN_PROGRESS", "WAITING", "COMPLETED", "FAILED", "CANCELLED", "DEPENDENCY_FAILED"];
const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("greenroom-token");
let refreshing = false;
let pageAfter = 0;        // the tasks table's page: tasks after this order
let nextAfter = null;     // the next page's start, when there is one
let shownTask = null;     // the task whose details are open (set at the click: a late answer about another is dropped)
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
  for (const cell of cells) tr.append(el("td", cell));
  return tr;
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleTimeString() : "";
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
  bulkPreview = null;
  $("task-fields").replaceChildren();
  for (const id of ["task-input", "task-id", "about", "problem", "notice-text", "bulk-shown"]) $(id).textContent = "";
  $("notice").hidden = true;
  $("bulk-apply").hidden = true;
  for (const body of document.querySelectorAll("#dashboard tbody, #counts, #approvals, #events, #task-events, #task-steps"))
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
  $("about").textContent = `version ${status.version} · up ${Math.round(status.uptime)} s` +
    (status.stopping ? " · stopping" : "");
  const counts = $("counts");
  counts.replaceChildren();
  for (const state of STATES) {
    const box = el("div", null, { class: "count", "data-status": state });
    box.append(el("span", status.tasks.by_status[state] || 0, { class: "n" }), el("span", state));
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
    const limit = [b.limit !== null ? `${b.limit} tokens` : null, b.cost_limit !== null ? `${b.cost_limit}` : null]
      .filter(Boolean).join(", ") || "no limit";
    const tr = row([`budget ${name}`, `${b.tokens} tokens, ${b.cost} spent of ${limit}${b.exhausted ? " (exhausted)" : ""}`]);
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
    const approve = el("button", "Approve", { type: "button", class: "approve" });
    const deny = el("button", "Deny", { type: "button", class: "deny" });
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

async function decide(taskId, verb) {
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

async function showTasks() {
  const query = new URLSearchParams({ limit: "20", after: String(pageAfter) });
  if ($("filter-status").value) query.set("status", $("filter-status").value);
  if ($("filter-type").value.trim()) query.set("type", $("filter-type").value.trim());
  if ($("filter-archived").checked) query.set("archived", "1");
  const page = await api(`/v1/tasks?${query}`);
  const body = $("tasks").tBodies[0];
  body.replaceChildren();
  for (const task of page.tasks) {
    const tr = row([task.id, task.type, task.status, task.attempt, task.owner || "", when(task.updated_at)]);
    tr.dataset.task = task.id;
    tr.addEventListener("click", () => showTask(task.id, true));
    body.append(tr);
  }
  nextAfter = page.next;
  $("next-page").disabled = nextAfter === null;
}

async function showTask(taskId, withEvents) {
  if (withEvents) shownTask = taskId;   // a click: from now on only this task's answers are shown
  const task = await api(`/v1/tasks/${encodeURIComponent(taskId)}`);
  if (shownTask !== taskId || !token) return;   // another was chosen (or the page logged out) meanwhile
  $("task-section").hidden = false;
  $("task-id").textContent = task.id;
  const fields = $("task-fields");
  fields.replaceChildren();
  const shown = {
    type: task.type, state: task.status, owner: task.owner || "—",
    attempt: `${task.attempt} of ${task.max_attempts}`, "depends on": (task.depends_on || []).join(", ") || "—",
    created: when(task.created_at), updated: when(task.updated_at),
    result: task.result ? JSON.stringify(task.result.output ?? task.result) : "—",
    error: task.error ? task.error.message || JSON.stringify(task.error) : "—",
  };
  if (task.waiting) shown["waiting on"] = `${task.waiting.tool} ${JSON.stringify(task.waiting.arguments)}`;
  for (const [name, value] of Object.entries(shown)) fields.append(el("dt", name), el("dd", value));
  $("task-input").textContent = JSON.stringify(task.input, null, 2);
  if (withEvents) await Promise.all([showTaskEvents(taskId), showTaskSteps(taskId)]);
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
  for (const step of steps) {
    const summary = JSON.stringify(step.body);
    const text = `${step.key} ${step.kind} (attempt ${step.attempt}) ${summary.length > 200 ? summary.slice(0, 200) + "…" : summary}`;
    list.append(el("li", text, { "data-kind": step.kind, "data-key": step.key }));
  }
}

async function showTaskEvents(taskId) {
  const list = $("task-events");
  const query = new URLSearchParams({ task: taskId, follow: "0" });
  const response = await fetch(`/v1/events?${query}`, { headers: { Authorization: `Bearer ${token}` } });
  if (!response.ok) return;
  const text = await response.text();
  if (shownTask !== taskId) return;
  list.replaceChildren();
  for (const event of parseEvents(text).events) list.append(eventItem(event));
}

function eventItem(event) {
  const text = `#${event.seq} ${when(event.ts)} ${event.type} ${event.task_id || ""} ${event.agent_id || ""}`;
  return el("li", text, { "data-type": event.type, "data-task": event.task_id || "" });
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
  $("filter").addEventListener("submit", (event) => { event.preventDefault(); pageAfter = 0; refresh(); });
  $("first-page").addEventListener("click", () => { pageAfter = 0; refresh(); });
  $("next-page").addEventListener("click", () => { if (nextAfter !== null) { pageAfter = nextAfter; refresh(); } });
  setInterval(refresh, 1000);
  if (token) logIn(token); else showLogin("");
});
