// The Turnstile dashboard's script (served at /ui/app.js; docs/operations.md, "Dashboard").
//
// It reads only this node's client API, as any client would: /v1/cluster and /readyz for the
// cluster, the paged range reads for locks, elections and leases (linearizable, so a node cut
// off from the majority shows its error instead of stale data), and /v1/watch for the live
// tail. With authentication on it sends `Authorization: Bearer <token>` (kept in this tab's
// sessionStorage only) and shows what that principal may read.
//
// Everything from the cluster is written with textContent or setAttribute, never as HTML:
// lock names, keys and values come from other tenants, some hostile.
"use strict";

/** Period of the table refresh. */
const REFRESH_MS = 1000;
/** Items asked for per table (one page; the count says when there are more). */
const ROWS_MAX = 200;
/** Events kept in the tail, newest first. */
const EVENTS_MAX = 200;
/** Revisions of history the tail starts with. */
const TAIL_BACKLOG_REVISIONS = 50;
/** Longest incomplete event frame buffered before the stream is dropped and reopened. */
const FRAME_BYTES_MAX = 1024 * 1024;
/** Wait before reopening a watch stream that ended or failed. */
const RETRY_MS = 1000;
const TOKEN_KEY = "turnstile.token";
/** Names shown (locks, elections, events): `/ui?prefix=...`. A principal allowed only part of
 * the names must set it to a prefix it may read. */
const PREFIX = new URLSearchParams(location.search).get("prefix") || "";
const PREFIX_QUERY = PREFIX ? `&prefix=${encodeURIComponent(PREFIX)}` : "";

/** What the tests (and a curious operator, from the console) can read. */
const status = { refreshes: 0, events: 0, lastError: null, unauthenticated: false };
window.turnstileDashboard = status;

class ApiError extends Error {
  constructor(status, code, message) {
    super(code ? `${status} ${code}: ${message}` : `${status}: ${message}`);
    this.status = status;
  }
}

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function get(path) {
  const answer = await fetch(path, { headers: authHeaders(), cache: "no-store" });
  let body = null;
  try {
    body = await answer.json();
  } catch (_) {
    // Not JSON (a proxy's error page, say): the status says enough.
  }
  if (!answer.ok) {
    const code = body && body.code;
    if (answer.status === 401) {
      unauthenticated(body && body.message);
    }
    throw new ApiError(answer.status, code, (body && body.message) || answer.statusText);
  }
  return body;
}

/** An element with attributes and children; strings become text nodes, never markup. */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const $ = (id) => document.getElementById(id);
const show = (v) => (v === null || v === undefined ? "–" : String(v));

function unauthenticated(message) {
  status.unauthenticated = true;
  $("auth").hidden = false;
  notice(`This cluster needs a credential: ${message || "unauthenticated"}. Enter a token.`);
}

function notice(text) {
  const n = $("notice");
  n.textContent = text || "";
  n.hidden = !text;
}

function sectionError(name, error) {
  const p = $(`${name}-error`);
  p.textContent = error ? `Not available: ${error.message}` : "";
  p.hidden = !error;
}

function count(name, page) {
  const n = page.items.length;
  $(`${name}-count`).textContent = page.more ? `(first ${n}; more exist)` : `(${n})`;
}

function renderCluster(c, ready) {
  const leader = c.leader_id;
  const lastIndex = c.log && c.log.last_index;
  const applyLag =
    c.commit_index === null || c.commit_index === undefined
      ? null
      : Math.max(0, c.commit_index - c.applied_index);
  $("node").textContent = `node ${c.node_id} · ${c.state.toLowerCase()} · cluster ${show(c.cluster_id)}`;
  const fields = [
    ["Leader", leader === null ? "none" : `node ${leader}`],
    ["Term", c.term],
    ["Commit index", c.commit_index],
    ["Applied index", c.applied_index],
    ["Apply lag", applyLag],
    ["Phase", c.phase],
    ["Ready", ready.ready ? "yes" : `no: ${show(ready.reason)}`],
    ["Snapshot at", c.last_snapshot_index],
  ];
  $("summary").replaceChildren(
    ...fields.flatMap(([k, v]) => [
      el("dt", null, k),
      el("dd", k === "Ready" ? { class: ready.ready ? "ok" : "bad" } : null, show(v)),
    ]),
  );
  const isLeader = leader === c.node_id;
  $("members").replaceChildren(
    ...c.members.map((m) => {
      const role = m.id === leader ? "leader" : m.voter ? "voter" : "learner";
      const reach = m.reachable === null ? "–" : m.reachable ? "yes" : "no";
      const lag =
        m.matched_index === null || lastIndex === null ? null : Math.max(0, lastIndex - m.matched_index);
      return el(
        "tr",
        { "data-node": m.id },
        el("td", { class: "num" }, m.id),
        el("td", { class: "addr" }, m.addr),
        el("td", null, role),
        el("td", { class: m.reachable === false ? "bad" : null }, reach),
        el("td", { class: "num" }, show(m.matched_index)),
        el("td", { class: "num" }, show(lag)),
      );
    }),
  );
  $("members-note").textContent = isLeader
    ? ""
    : `Reachability and replication lag are known on the leader${leader === null ? "" : ` (node ${leader})`}: open its /ui to see them.`;
}

function holderTags(holders) {
  return holders.map((h) =>
    el("span", { class: "tag" }, `${show(h.lease_id)} / ${show(h.token)} / ${h.mode}`),
  );
}

function renderLocks(page) {
  count("locks", page);
  $("locks-rows").replaceChildren(
    ...page.items.map((l) => {
      const first = l.waiters.slice(0, 5).map((w) => show(w.lease_id)).join(", ");
      const waiting = l.waiters.length === 0 ? "–" : `${l.waiters.length}: ${first}${l.waiters.length > 5 ? ", …" : ""}`;
      return el(
        "tr",
        { "data-name": l.name, "data-holders": l.holders.length, "data-waiters": l.waiters.length },
        el("td", { class: "name" }, l.name),
        el("td", { class: "num" }, l.permits),
        el("td", null, ...holderTags(l.holders)),
        el("td", null, waiting),
      );
    }),
  );
}

function renderElections(page) {
  count("elections", page);
  $("elections-rows").replaceChildren(
    ...page.items.map((e) => {
      const l = e.leader;
      return el(
        "tr",
        { "data-name": e.name },
        el("td", { class: "name" }, e.name),
        el("td", { class: "num" }, l ? show(l.lease_id) : "none"),
        el("td", { class: "num" }, l ? show(l.token) : "–"),
        el("td", { class: "name" }, l ? l.value : ""),
      );
    }),
  );
}

function renderLeases(page) {
  count("leases", page);
  $("leases-rows").replaceChildren(
    ...page.items.map((l) =>
      el(
        "tr",
        { "data-lease": l.lease_id },
        el("td", { class: "num" }, l.lease_id),
        el("td", { class: "num" }, l.ttl_ms),
        el("td", { class: "num" }, l.remaining_ms),
      ),
    ),
  );
}

/** One table: a read whose failure shows in its own section, not over the whole page. */
async function table(name, path, render) {
  try {
    render(await get(path));
    sectionError(name, null);
  } catch (e) {
    sectionError(name, e);
    status.lastError = e.message;
  }
}

async function refresh() {
  try {
    const [cluster, ready] = await Promise.all([get("/v1/cluster?digest=false"), readyz()]);
    renderCluster(cluster, ready);
    if (!status.unauthenticated) notice(null);
  } catch (e) {
    status.lastError = e.message;
    if (!status.unauthenticated) notice(`This node did not answer: ${e.message}`);
  }
  await Promise.all([
    table("locks", `/v1/locks?limit=${ROWS_MAX}${PREFIX_QUERY}`, renderLocks),
    table("elections", `/v1/elections?limit=${ROWS_MAX}${PREFIX_QUERY}`, renderElections),
    table("leases", `/v1/leases?limit=${ROWS_MAX}`, renderLeases),
  ]);
  status.refreshes += 1;
}

async function readyz() {
  // 503 carries the reason in its body; it is an answer here, not a failure.
  const answer = await fetch("/readyz", { cache: "no-store" });
  return answer.json();
}

async function refreshLoop() {
  for (;;) {
    await refresh();
    await new Promise((r) => setTimeout(r, REFRESH_MS));
  }
}

// The live tail.

function subjectOf(e) {
  if (e.key !== undefined) return e.key;
  if (e.lock !== undefined) return e.lock;
  if (e.election !== undefined) return e.election;
  return `lease ${e.lease_id}`;
}

function detailsOf(e) {
  const parts = [];
  if (e.lease_id !== undefined && e.kind !== "lease_expired") parts.push(`lease ${show(e.lease_id)}`);
  if (e.token !== undefined) parts.push(`token ${show(e.token)}`);
  if (e.mode !== undefined) parts.push(e.mode);
  if (e.cause !== undefined) parts.push(e.cause);
  if (e.value !== undefined) parts.push(`value ${JSON.stringify(e.value).slice(0, 80)}`);
  return parts.join(" · ");
}

function addEvent(kind, e) {
  const rows = $("events-rows");
  rows.prepend(
    el(
      "tr",
      { "data-kind": kind, "data-subject": subjectOf(e) },
      el("td", { class: "num" }, e.revision),
      el("td", null, kind),
      el("td", { class: "name" }, subjectOf(e)),
      el("td", null, detailsOf(e)),
    ),
  );
  while (rows.childElementCount > EVENTS_MAX) rows.lastElementChild.remove();
  status.events += 1;
}

/** Parses one SSE frame into {event, data, id}; null for a comment (keep-alive). */
function parseFrame(frame) {
  let event = "message";
  let id = null;
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue;
    const at = line.indexOf(":");
    const field = at < 0 ? line : line.slice(0, at);
    const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  if (data.length === 0) return null;
  return { event, id, data: JSON.parse(data.join("\n")) };
}

/** Follows /v1/watch, resuming after the last event seen (Last-Event-ID) when it breaks. */
async function tailLoop() {
  let lastId = null;
  let from = null;
  for (;;) {
    try {
      if (lastId === null && from === null) {
        const c = await get("/v1/cluster?digest=false");
        from = Math.max(1, c.applied_index - TAIL_BACKLOG_REVISIONS);
      }
      const headers = authHeaders();
      let path = `/v1/watch?${PREFIX ? `prefix=${encodeURIComponent(PREFIX)}` : ""}`;
      if (lastId !== null) headers["Last-Event-ID"] = lastId;
      else path += `${PREFIX ? "&" : ""}from_revision=${from}`;
      const answer = await fetch(path, { headers, cache: "no-store" });
      if (!answer.ok) {
        if (answer.status === 401) unauthenticated("the watch stream was refused");
        throw new Error(`watch answered ${answer.status}`);
      }
      $("events-state").textContent = "(live)";
      const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = parseFrame(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
          if (frame === null) continue;
          if (frame.event === "compacted") {
            // The backlog asked for is gone: start at the oldest revision kept.
            lastId = null;
            from = frame.data.oldest_revision;
            continue;
          }
          lastId = frame.id;
          addEvent(frame.event, frame.data);
        }
        if (buffer.length > FRAME_BYTES_MAX) {
          await reader.cancel();
          throw new Error("an event frame was too large");
        }
      }
    } catch (e) {
      status.lastError = e.message;
    }
    $("events-state").textContent = "(reconnecting)";
    await new Promise((r) => setTimeout(r, RETRY_MS));
  }
}

function setUpFilter() {
  $("prefix").value = PREFIX;
  $("filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const prefix = $("prefix").value;
    location.search = prefix ? `?prefix=${encodeURIComponent(prefix)}` : "";
  });
}

function setUpAuth() {
  $("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token").value.trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    status.unauthenticated = false;
    notice(null);
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  if (sessionStorage.getItem(TOKEN_KEY)) $("auth").hidden = false;
}

setUpFilter();
setUpAuth();
refreshLoop();
tailLoop();
