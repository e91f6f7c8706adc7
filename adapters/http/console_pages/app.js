// The foldline operator console. Hand-written, no build step, no libraries.
// Every value from the server is put into the page as text (createTextNode / textContent),
// never as markup; the Content-Security-Policy forbids inline script besides.
"use strict";

const KINDS = { jobs: "job", sessions: "session", tasks: "task" };
const TABLE_OF = { job: "jobs", session: "sessions", task: "tasks" };
const CONTROLS = {
  job: ["pause", "continue", "cancel"],
  session: ["pause", "continue", "detach", "stop", "cancel", "taint"],
  task: [],
};
const SVG = "http://www.w3.org/2000/svg";
const MAX_FOLLOWED = 2000; // rows the log view keeps while following

const app = { machines: [], overview: null, readOnly: false };

// -- building the page ------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  return fill(el, attrs, children);
}

function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function text(value) {
  if (value === null || value === undefined) return "—";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function stateBadge(state) {
  return h("span", { class: `state ${state}`, "data-state": state }, state);
}

function entityLink(kind, id) {
  return h("a", { href: `#/${kind}/${encodeURIComponent(id)}` }, id);
}

function streamLink(streamId) {
  const [kind, ...rest] = streamId.split(":");
  const id = rest.join(":");
  if (TABLE_OF[kind]) return entityLink(kind, id);
  return h("a", { href: `#/stream/${encodeURIComponent(streamId)}` }, streamId);
}

function notice(message, good) {
  const el = document.getElementById("notice");
  el.className = good ? "good" : "bad";
  el.textContent = message;
}

function duration(ms) {
  if (!(ms >= 0)) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

function jsonBlock(value, label) {
  return h("details", {}, h("summary", {}, label || "JSON"),
    h("pre", {}, JSON.stringify(value, null, 2)));
}

// -- talking to the server ----------------------------------------------------------------------

class Refusal extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The token is asked for once (the header's field, or the panel a 401 shows) and kept in this
// tab's session storage. It goes only in an Authorization header, never in a URL: URLs end up
// in logs and history. The read-only console asks for none, and the page sends none then.
const TOKEN_KEY = "foldline-token";

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function withToken(path, headers) {
  const all = new Headers(headers || {});
  const value = token();
  if (value && /^\/(v1|console\/api)\//.test(path)) all.set("Authorization", `Bearer ${value}`);
  return all;
}

async function api(path, options) {
  const headers = withToken(path, options && options.headers);
  const answer = await fetch(path, { ...options, headers });
  const body = await answer.text();
  let data = null;
  try { data = body ? JSON.parse(body) : null; } catch (_) { data = null; }
  if (!answer.ok) {
    const error = (data && data.error) || {};
    const code = typeof error === "string" ? "error" : error.code || "error";
    const message = typeof error === "string" ? error : error.message || answer.statusText;
    throw new Refusal(answer.status, code, message);
  }
  return data;
}

function query(params) {
  const pairs = Object.entries(params).filter(([, v]) => v !== null && v !== undefined && v !== "");
  return pairs.length ? "?" + new URLSearchParams(pairs).toString() : "";
}

// -- the events feed: one stream for the whole page --------------------------------------------
// EventSource cannot send a header, and the token never goes in a URL, so the feed reads the
// SSE stream with fetch. Event ids are log positions: whenever the stream ends (a restart, a
// network error) it reconnects a second later with Last-Event-ID, the last position it saw,
// and the server resumes after it. A 401 stops it until a token is given.

const feed = {
  controller: null,
  last: 0,
  listeners: new Set(),
  retry: null,
  start(after) {
    this.last = after;
    this.open();
  },
  open() {
    if (this.controller) this.controller.abort();
    clearTimeout(this.retry);
    this.retry = null;
    const controller = new AbortController();
    this.controller = controller;
    this.read(controller.signal).then((again) => again, () => true).then((again) => {
      if (this.controller !== controller || !again) return; // replaced, or needs a token
      live(false, "reconnecting");
      this.retry = setTimeout(() => { this.retry = null; this.open(); }, 1000);
    });
  },
  async read(signal) {
    const headers = withToken("/v1/events", { Accept: "text/event-stream" });
    headers.set("Last-Event-ID", String(this.last));
    const answer = await fetch("/v1/events", { headers, signal, cache: "no-store" });
    if (answer.status === 401) {
      live(false, "needs the token");
      return false;
    }
    if (!answer.ok) throw new Error(`events feed: ${answer.status}`);
    live(true);
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let block = {};
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return true;
      buffer += value;
      for (let end = buffer.indexOf("\n"); end >= 0; end = buffer.indexOf("\n")) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (line === "") {
          this.dispatch(block);
          block = {};
        } else if (!line.startsWith(":")) { // a comment (keep-alive) carries nothing
          const colon = line.indexOf(":");
          const name = colon < 0 ? line : line.slice(0, colon);
          const field = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          block[name] = name === "data" && name in block ? `${block.data}\n${field}` : field;
        }
      }
    }
  },
  dispatch(block) {
    if (block.event === "shutdown") {
      live(false, "server restarting");
      return;
    }
    const position = Number(block.id);
    if (!("data" in block) || !(position > this.last)) return; // already seen: be sure
    this.last = position;
    live(true);
    const event = JSON.parse(block.data);
    for (const listener of this.listeners) listener(event);
  },
  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  },
};

function eventTypes() {
  const types = new Set();
  for (const machine of app.machines) for (const t of machine.transitions) types.add(t.event_type);
  return types;
}

function live(on, why) {
  // Only a change of connection is announced; the position moves quietly beside it.
  const el = document.getElementById("live");
  const wanted = on ? "live" : why;
  if (el.textContent !== wanted) {
    el.className = on ? "on" : "off";
    el.textContent = wanted;
  }
  document.getElementById("position").textContent = `position ${feed.last}`;
}

// A page subscribes before it loads and handles what arrived meanwhile once it is drawn, so no
// event can fall between its first read and its live updates (pages drop what they have).
function subscription() {
  const queue = [];
  const cleanups = [];
  let target = null;
  const off = feed.subscribe((event) => (target ? target(event) : queue.push(event)));
  return {
    start(handler) {
      target = handler;
      for (const event of queue.splice(0)) handler(event);
    },
    onLeave(fn) { cleanups.push(fn); },
    leave() {
      off();
      for (const fn of cleanups) fn();
    },
  };
}

function throttle(fn, ms) {
  let timer = null;
  return () => {
    if (timer) return;
    // A refresh that fails (a token gone stale, the server away) waits for the next event.
    timer = setTimeout(() => { timer = null; Promise.resolve().then(fn).catch(() => {}); }, ms);
  };
}

// -- overview ---------------------------------------------------------------------------------

function diagram(machine, counts) {
  // States on a grid in declaration order; transitions as lines between their centres.
  const cols = 4, w = 120, hgt = 46, gx = 36, gy = 34;
  const place = {};
  machine.states.forEach((state, i) => {
    place[state] = { x: 10 + (i % cols) * (w + gx), y: 30 + Math.floor(i / cols) * (hgt + gy) };
  });
  const rows = Math.ceil(machine.states.length / cols);
  const width = 20 + cols * w + (cols - 1) * gx, height = 40 + rows * hgt + (rows - 1) * gy;
  const svg = s("svg", { class: "machine", viewBox: `0 0 ${width} ${height}`, role: "group",
    "aria-label": `${machine.kind} machine` });
  svg.append(s("defs", {}, s("marker", { id: `arrow-${machine.kind}`, viewBox: "0 0 8 8", refX: 8,
    refY: 4, markerWidth: 6, markerHeight: 6, orient: "auto" }, s("path", { d: "M0,0 L8,4 L0,8 z",
    fill: "#9aa4b2" }))));
  svg.append(s("text", { x: 10, y: 18, class: "count" }, machine.kind));
  const seen = new Set();
  for (const t of machine.transitions) {
    for (const source of t.sources) {
      if (!t.dest || t.dest === source || seen.has(source + ">" + t.dest)) continue;
      seen.add(source + ">" + t.dest);
      const a = place[source], b = place[t.dest];
      if (!a || !b) continue;
      const [x1, y1, x2, y2] = clip(a, b, w, hgt);
      svg.append(s("line", { class: "edge", x1, y1, x2, y2,
        "marker-end": `url(#arrow-${machine.kind})` }));
    }
  }
  const terminal = new Set(machine.terminal);
  const table = TABLE_OF[machine.kind];
  for (const state of machine.states) {
    const { x, y } = place[state];
    const n = (counts && counts[state]) || 0;
    const group = s("g", { class: `st${terminal.has(state) ? " terminal" : ""}${n ? " busy" : ""}`,
      "data-kind": machine.kind, "data-state": state },
      s("rect", { class: "box", x, y, width: w, height: hgt, rx: 6 }),
      s("text", { x: x + 8, y: y + 18 }, state),
      s("text", { x: x + 8, y: y + 37, class: "count" }, String(n)));
    svg.append(table
      ? s("a", { href: `#/${table}?state=${state}`, "aria-label": `${machine.kind} ${state}: ${n}` },
        group)
      : group);
  }
  return svg;
}

function clip(a, b, w, hgt) {
  // From the edge of box a to the edge of box b, so arrowheads stay visible.
  const ax = a.x + w / 2, ay = a.y + hgt / 2, bx = b.x + w / 2, by = b.y + hgt / 2;
  const dx = bx - ax, dy = by - ay;
  const f = (x, y) => Math.min(Math.abs((w / 2) / (x || 1e-9)), Math.abs((hgt / 2) / (y || 1e-9)));
  const k = f(dx, dy);
  return [ax + dx * k, ay + dy * k, bx - dx * k, by - dy * k];
}

function updateCounts(view, root) {
  for (const [kind, states] of Object.entries(view.counts)) {
    for (const [state, n] of Object.entries(states)) {
      const group = root.querySelector(`g[data-kind="${kind}"][data-state="${state}"]`);
      if (!group) continue;
      group.querySelector(".count").textContent = String(n);
      group.classList.toggle("busy", n > 0);
      const link = group.parentNode;
      if (link.getAttribute && link.hasAttribute("aria-label")) {
        link.setAttribute("aria-label", `${kind} ${state}: ${n}`);
      }
    }
  }
}

function problemList(problems, empty) {
  if (!problems.length) return h("p", { class: "muted" }, empty);
  return h("ul", { class: "links" }, problems.map((p) =>
    h("li", {}, entityLink(p.kind, p.id), " ", stateBadge(p.state), " ", text(p.detail),
      h("span", { class: "muted" }, " · ", p.at))));
}

async function pageOverview(main, sub) {
  const view = await api("/console/api/overview");
  app.overview = view;
  const status = h("dl", { class: "card", id: "status" });
  const ping = h("dd", { id: "ping" }, app.readOnly ? "not served (read-only console)" : "…");
  const head = h("dd", { id: "head" }, String(view.head));
  const lease = view.leases[0];
  status.append(
    h("dt", {}, "log head"), head,
    h("dt", {}, "lease"), h("dd", { id: "lease" }, lease
      ? `${lease.state} by ${lease.holder} · epoch ${lease.epoch} · renewed ${lease.renewed_at}`
      : "never taken"),
    h("dt", {}, "/ping"), ping,
    h("dt", {}, "mode"), h("dd", {}, view.read_only ? "read-only (auditor)" : "server"));
  const errors = h("div", { class: "card", id: "errors" });
  const lost = h("div", { class: "card", id: "notifications" });
  const fillProblems = (v) => {
    errors.replaceChildren(h("strong", {}, "recent errors"), problemList(v.errors, "none"));
    lost.replaceChildren(h("strong", {}, "unfinished notifications"),
      problemList(v.unfinished_notifications, "none"));
  };
  fillProblems(view);
  const diagrams = h("div", { class: "machines" },
    app.machines.map((m) => diagram(m, view.counts[m.kind])));
  main.replaceChildren(h("h1", {}, "Overview"), h("div", { class: "cards" }, status, errors, lost),
    h("h2", {}, "Machines, with the live count of entities in each state"), diagrams);
  const checkPing = async () => {
    if (app.readOnly) return;
    try {
      const answer = await api("/ping");
      ping.textContent = `${answer.status} · last update ${new Date(
        answer.time_of_last_update * 1000).toISOString()}`;
    } catch (error) {
      ping.textContent = `unreachable (${error.message})`;
    }
  };
  checkPing();
  const refresh = throttle(async () => {
    const fresh = await api("/console/api/overview");
    head.textContent = String(fresh.head);
    updateCounts(fresh, diagrams);
    fillProblems(fresh);
    checkPing();
  }, 200);
  sub.start(refresh);
}

// -- lists ------------------------------------------------------------------------------------

async function pageList(main, table, params, sub) {
  const kind = KINDS[table];
  const machine = app.machines.find((m) => m.kind === kind);
  const field = (name, label, control) => h("label", {}, label, control || h("input",
    { name, value: params.get(name) || "", type: "search" }));
  const stateSelect = h("select", { name: "state" }, h("option", { value: "" }, "any"),
    machine.states.map((st) => h("option", { value: st, selected: params.get("state") === st }, st)));
  const form = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    const data = Object.fromEntries(new FormData(form).entries());
    location.hash = `#/${table}${query(data)}`;
  } }, field("state", "state", stateSelect), field("session", "session"),
  field("agent", "agent"), field("prefix", "id prefix"), h("button", { type: "submit" }, "Apply"));
  const body = h("tbody");
  const pager = h("div", { class: "pager" });
  const shown = h("p", { class: "muted", id: "shown" });
  main.replaceChildren(h("h1", {}, table[0].toUpperCase() + table.slice(1)), form,
    h("table", { id: "list" }, h("thead", {}, h("tr", {}, ["id", "state", "session", "agent",
      "summary", "updated"].map((c) => h("th", { scope: "col" }, c)))), body), pager, shown);
  const filters = { state: params.get("state"), session: params.get("session"),
    agent: params.get("agent"), prefix: params.get("prefix") };
  const cursors = [null];
  const load = async () => {
    const after = cursors[cursors.length - 1];
    const started = performance.now();
    const page = await api(`/console/api/lists/${table}${query({ ...filters, after, limit: 50 })}`);
    body.replaceChildren(...page.items.map((row) => h("tr", { "data-id": row.id },
      h("td", {}, entityLink(kind, row.id)), h("td", {}, stateBadge(row.state)),
      h("td", {}, kind === "session" ? "—" : entityLink("session", row.session_id)),
      h("td", {}, text(row.agent)), h("td", {}, text(row.summary).slice(0, 120)),
      h("td", { class: "num" }, row.updated_at))));
    if (!page.items.length) body.append(h("tr", {}, h("td", { colspan: 6 }, "nothing matches")));
    pager.replaceChildren(
      cursors.length > 1 ? h("button", { type: "button", onclick: () => { cursors.pop(); load(); } },
        "← Newer") : "",
      page.next ? h("button", { type: "button", onclick: () => { cursors.push(page.next); load(); } },
        "Older →") : "");
    shown.textContent = `${page.items.length} shown, most recently updated first · page ` +
      `${cursors.length} · ${Math.round(performance.now() - started)} ms` + (page.partial
      ? " · this page searched its share of rows for the agent; Older → searches on" : "");
  };
  await load();
  const refresh = throttle(() => { if (cursors.length === 1) load(); }, 500);
  sub.start((event) => { if (event.stream_id.startsWith(kind + ":")) refresh(); });
}

// -- timelines (entity pages and stream histories) -------------------------------------------------

function timeline(events, terminal) {
  const body = h("tbody");
  const rows = [];
  const add = (event) => {
    if (rows.some((r) => r.event.version === event.version)) return false;
    const spent = h("td", { class: "num" });
    const row = { event, spent };
    rows.push(row);
    body.append(h("tr", { "data-position": event.position, "data-type": event.event_type },
      h("td", { class: "num" }, String(event.position)), h("td", { class: "num" }, event.recorded_at),
      h("td", {}, event.event_type), h("td", {}, stateBadge(event.state)), spent,
      h("td", {}, jsonBlock(event.event, "payload"))));
    tick();
    return true;
  };
  const totals = h("p", { class: "muted", id: "time-in-states" });
  const tick = () => {
    const spentIn = new Map();
    rows.forEach((row, i) => {
      const start = Date.parse(row.event.recorded_at);
      const next = rows[i + 1];
      const state = row.event.state;
      let ms = null;
      if (next) ms = Date.parse(next.event.recorded_at) - start;
      else if (!terminal.has(state)) ms = Date.now() - start;
      if (ms !== null) spentIn.set(state, (spentIn.get(state) || 0) + ms);
      if (next) row.spent.textContent = duration(ms);
      else if (terminal.has(state)) row.spent.textContent = "(final)";
      else row.spent.textContent = `${duration(ms)} so far`;
    });
    totals.textContent = "time in each state: " + ([...spentIn].map(([state, ms]) =>
      `${state} ${duration(ms)}`).join(" · ") || "—");
  };
  events.forEach(add);
  const table = h("div", {}, h("table", { id: "timeline" }, h("thead", {}, h("tr", {},
    ["position", "time", "type", "state after", "time in state", "event"].map((c) =>
      h("th", { scope: "col" }, c)))), body), totals);
  tick();
  return { table, add, tick };
}

async function streamEvents(streamId) {
  const events = [];
  let after = 0;
  for (let pages = 0; pages < 100; pages++) { // bounded: 100 pages of a stream's history
    const page = await api(`/v1/streams/${encodeURIComponent(streamId)}/events?after=${after}`);
    events.push(...page.events);
    if (!page.events.length || page.events.length < 1000) break;
    after = page.events[page.events.length - 1].version;
  }
  return events;
}

async function pageStream(main, streamId, sub) {
  const kind = streamId.split(":")[0];
  const machine = app.machines.find((m) => m.kind === kind);
  const events = await streamEvents(streamId);
  const line = timeline(events, new Set(machine ? machine.terminal : []));
  main.replaceChildren(h("h1", {}, `Stream ${streamId}`), line.table);
  const timer = setInterval(line.tick, 1000);
  sub.onLeave(() => clearInterval(timer));
  sub.start((event) => { if (event.stream_id === streamId) line.add(event); });
}

// -- entity pages -------------------------------------------------------------------------------

async function pageEntity(main, kind, id, sub) {
  const machine = app.machines.find((m) => m.kind === kind);
  const [found, events, refused] = await Promise.all([
    api(`/console/api/entities/${kind}/${encodeURIComponent(id)}`),
    streamEvents(`${kind}:${id}`),
    kind === "session" ? streamEvents(`audit:${id}`).catch(() => []) : []]);
  let entity = found;
  // If-Match: a job's controls name its control revision (ADR 0057), a session's its version.
  const expected = () => (kind === "job" ? entity.row.control_revision : entity.row.version);
  const line = timeline(events, new Set(machine.terminal));
  const output = h("pre", { id: "output" }, events.filter((e) => e.event_type === "job.output")
    .map((e) => e.event.text).join(""));
  const heading = h("h1", {}, `${kind} ${id} `, stateBadge(entity.row.state));
  const details = h("div");
  const reason = h("input", { id: "reason", type: "text", placeholder: "optional; taint needs one" });
  const controls = app.readOnly || !CONTROLS[kind].length ? h("p", { class: "muted" },
    app.readOnly ? "read-only console: no controls" : "no controls for tasks (cancel through A2A)")
    : h("div", { class: "controls", role: "group", "aria-label": "controls" },
      CONTROLS[kind].map((action) => h("button", { type: "button", "data-action": action,
        onclick: () => control(kind, id, action, reason.value, expected, reload) },
      action)), h("label", {}, "reason ", reason));
  const channel = kind === "job" ? channelPanel(id, expected, () => reload()) : null;
  const render = () => {
    if (channel) channel.update(entity.row).catch(() => {}); // a refused read waits for the next
    heading.replaceChildren(`${kind} ${id} `, stateBadge(entity.row.state),
      h("span", { class: "muted" }, ` version ${entity.row.version}`));
    const row = entity.row;
    const parts = [h("h2", {}, "Lineage"), entity.lineage.length
      ? h("ul", { class: "links", id: "lineage" }, entity.lineage.map((l) => h("li", {},
        `${l.relation}: `, l.kind === "push" ? streamLink(`push:${l.id}`) : entityLink(l.kind, l.id),
        " ", stateBadge(l.state))))
      : h("p", { class: "muted" }, "no parent, children, session or task")];
    if (kind === "session") parts.push(...refusals(id, refused));
    if (kind === "job") {
      const files = JSON.parse(row.files || "[]");
      parts.push(h("h2", {}, "Result"), h("pre", { id: "result" }, text(row.result)),
        h("h2", {}, "Files"), files.length ? h("ul", { class: "links" }, files.map((f) =>
          h("li", {}, text(f.path), h("span", { class: "muted" }, ` ${f.size} bytes`))))
          : h("p", { class: "muted" }, "none"));
      if (row.patch_sha256) parts.push(...changes(id, row));
    }
    parts.push(h("h2", {}, "Row"), h("table", { id: "row" }, h("tbody", {},
      Object.entries(row).map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k),
        h("td", {}, text(v)))))));
    details.replaceChildren(...parts);
  };
  const reload = async () => {
    entity = await api(`/console/api/entities/${kind}/${encodeURIComponent(id)}`);
    render();
  };
  render();
  main.replaceChildren(heading, controls, channel ? channel.el : "",
    kind === "job" ? h("h2", {}, "Live output") : "",
    kind === "job" ? output : "", h("h2", {}, "Timeline"), line.table, details);
  const refresh = throttle(reload, 200);
  const timer = setInterval(line.tick, 1000);
  sub.onLeave(() => clearInterval(timer));
  sub.start((event) => {
    const mine = event.stream_id === `${kind}:${id}`;
    if (mine && line.add(event) && event.event_type === "job.output") {
      output.append(document.createTextNode(event.event.text));
    }
    if (mine || event.stream_id.startsWith("job:")) refresh(); // children and lineage move too
  });
}

// A session's refused spawns, controls and integrates (its audit stream, ADR 0065).
function refusals(id, events) {
  const heading = h("h2", {}, "Refusals ", streamLink(`audit:${id}`));
  if (!events.length) return [heading, h("p", { class: "muted" }, "none on record")];
  const head = ["when", "what", "control", "code", "caller", "target", "limits", "message"];
  const rows = events.map((e) => {
    const ev = e.event;
    const limits = Object.entries(ev.limits || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    const what = e.event_type === "audit.repeated" ? `${ev.action} ×${ev.count} more` : ev.action;
    return h("tr", {}, [e.recorded_at, what, ev.control, ev.code, ev.caller, ev.target, limits,
      ev.message || ""].map((cell) => h("td", {}, text(cell))));
  });
  return [heading, h("table", { id: "refusals" }, h("thead", {}, h("tr", {},
    head.map((name) => h("th", { scope: "col" }, name)))), h("tbody", {}, rows))];
}

// A writer's change: the paths it touched, and the patch itself, fetched as text.
function changes(id, row) {
  const paths = JSON.parse(row.patch_paths || "[]");
  const patch = h("pre", { id: "patch" }, "loading…");
  const headers = withToken(`/v1/jobs/${encodeURIComponent(id)}/patch`);
  fetch(`/v1/jobs/${encodeURIComponent(id)}/patch`, { headers })
    .then((answer) => answer.text().then((body) => {
      patch.textContent = answer.ok ? body : `patch unavailable (${answer.status}): ${body}`;
    }))
    .catch((error) => { patch.textContent = `patch unavailable: ${error}`; });
  return [h("h2", {}, "Changes"), h("p", { class: "muted" },
    `${row.patch_size} bytes against ${text(row.patch_base).slice(0, 12)}, sha256 ${row.patch_sha256}`),
  paths.length ? h("ul", { class: "links", id: "patch-paths" }, paths.map((p) => h("li", {}, text(p))))
    : h("p", { class: "muted" }, "no change"), patch];
}

// -- a run's live channel (job pages) ------------------------------------------------------------
// What the run takes (input "lines" or none), its active turn, its questions and the latest
// controls, from the job's row and GET /v1/jobs/{id}/controls; the forms post to /v1 like the
// other controls (If-Match, bearer token). Built once per page, so what is typed survives the
// page's refreshes; the turn field follows the run's turn until it is edited.

const EFFORTS = ["minimal", "low", "medium", "high"];

function channelPanel(id, version, after) {
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  const status = h("dl", { class: "card", id: "channel-status" });
  const requests = h("div", { id: "channel-requests" });
  const list = h("div", { id: "channel-controls" });
  const turn = h("input", { id: "steer-turn", type: "text", size: 8 });
  const steerText = h("textarea", { id: "steer-text", rows: 2, cols: 48, maxlength: 20000 });
  const finalText = h("input", { id: "finalize-text", type: "text", placeholder: "optional" });
  const picker = h("select", { id: "respond-request" });
  const answer = h("input", { id: "respond-text", type: "text" });
  const effort = h("select", { id: "effort" }, EFFORTS.map((e) => h("option", { value: e }, e)));
  let prefilled = "";
  const send = async (action, body) => {
    const headers = { "Content-Type": "application/json", "If-Match": `"${version()}"` };
    try {
      const sent = await api(`${base}/${action}`, { method: "POST", headers,
        body: JSON.stringify(body) });
      notice(`${action}: recorded as control ${sent.control}`, true);
    } catch (error) {
      const why = error.status ? `${error.status} ${error.code}` : "network error";
      notice(`${action} refused (${why}): ${error.message}`, false);
    }
    await after().catch(() => {});
  };
  const form = (action, fields, body) => h("form", { class: "filters", "data-channel": action,
    onsubmit: (e) => { e.preventDefault(); send(action, body()); } }, fields,
  h("button", { type: "submit", "data-action": action }, action));
  const forms = h("div", { id: "channel-forms", role: "group", "aria-label": "channel controls" },
    form("steer", [h("label", {}, "text", steerText), h("label", {}, "turn", turn)],
      () => ({ text: steerText.value, turn: turn.value })),
    form("interrupt", [], () => ({ turn: turn.value })),
    form("finalize", [h("label", {}, "text", finalText)],
      () => (finalText.value ? { text: finalText.value } : {})),
    form("respond", [h("label", {}, "request", picker), h("label", {}, "answer", answer)],
      () => ({ request: picker.value, response: { text: answer.value } })),
    form("effort", [h("label", {}, "effort", effort)], () => ({ effort: effort.value })));
  const el = h("section", { id: "channel" }, h("h2", {}, "Live channel"), status,
    app.readOnly ? "" : forms, h("h3", {}, "Questions"), requests,
    h("h3", {}, "Latest controls"), list);
  const update = async (row) => {
    const open = row.state === "running" && row.input === "lines";
    status.replaceChildren(h("dt", {}, "input"), h("dd", { id: "channel-input" },
      row.input || "none"), h("dt", {}, "active turn"),
    h("dd", { id: "channel-turn" }, row.turn || "none"));
    forms.hidden = !open;
    if (turn.value === prefilled) turn.value = row.turn || "";
    prefilled = row.turn || "";
    const found = await api(`${base}/controls`);
    const pending = found.requests.filter((r) => r.state === "pending");
    const chosen = picker.value;
    picker.replaceChildren(...pending.map((r) => h("option", { value: r.request,
      selected: r.request === chosen }, r.request)));
    requests.replaceChildren(found.requests.length ? h("ul", { class: "links" },
      found.requests.map((r) => h("li", { "data-request": r.request }, `${r.request}: `,
        text(r.question), " ", stateBadge(r.state))))
      : h("p", { class: "muted" }, "none asked"));
    list.replaceChildren(found.controls.length ? h("table", {}, h("thead", {}, h("tr", {},
      ["id", "action", "state", "by", "recorded", "line"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, found.controls.map((c) => h("tr", { "data-control": c.control },
      h("td", { class: "num" }, String(c.control)), h("td", {}, c.action),
      h("td", {}, stateBadge(c.state), c.reason ? ` ${c.reason}` : ""), h("td", {}, c.sent_by),
      h("td", { class: "num" }, c.recorded_at), h("td", {}, jsonBlock(c.body, "body"))))))
      : h("p", { class: "muted" }, "none sent"));
  };
  return { el, update };
}

async function control(kind, id, action, reason, version, after) {
  const headers = { "If-Match": `"${version()}"` };
  const body = reason ? JSON.stringify({ reason }) : action === "taint" ? "{}" : "";
  if (body) headers["Content-Type"] = "application/json";
  const path = `/v1/${TABLE_OF[kind]}/${encodeURIComponent(id)}/${action}`;
  try {
    const row = await api(path, { method: "POST", headers, body: body || undefined });
    notice(`${action}: accepted, ${kind} is now ${row.state}`, true);
  } catch (error) {
    const status = error.status ? `${error.status} ${error.code}` : "network error";
    notice(`${action} refused (${status}): ${error.message}`, false);
  }
  await after().catch(() => {}); // the notice says what happened; the page stays as it was
}

// -- the log ------------------------------------------------------------------------------------

async function pageLog(main, params, sub) {
  const kinds = (params.get("kind") || "").split(",").filter(Boolean);
  const type = params.get("type") || "";
  const kindBoxes = app.machines.map((m) => h("label", {}, h("input", { type: "checkbox",
    name: "kind", value: m.kind, checked: kinds.includes(m.kind) }), ` ${m.kind}`));
  const types = [...eventTypes()].sort();
  const typeSelect = h("select", { name: "type" }, h("option", { value: "" }, "any"),
    types.map((t) => h("option", { value: t, selected: t === type }, t)));
  const form = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    const picked = kindBoxes.map((l) => l.firstChild).filter((b) => b.checked).map((b) => b.value);
    location.hash = `#/log${query({ kind: picked.join(","), type: typeSelect.value })}`;
  } }, h("fieldset", {}, h("legend", {}, "stream kinds"), kindBoxes),
  h("label", {}, "event type", typeSelect), h("button", { type: "submit" }, "Filter"));
  const from = h("input", { id: "export-from", type: "number", min: 1, value: 1 });
  const to = h("input", { id: "export-to", type: "number", min: 1, value: feed.last || 1 });
  const exporter = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    exportRange(from.value, to.value);
  } }, h("label", {}, "from position", from), h("label", {}, "to position", to),
  h("button", { type: "submit" }, "Export JSON lines"));
  const streamId = h("input", { id: "stream-id", type: "search", placeholder: "job:job_…" });
  const history = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    if (streamId.value.trim()) location.hash = `#/stream/${encodeURIComponent(streamId.value.trim())}`;
  } }, h("label", {}, "a stream's history", streamId), h("button", { type: "submit" }, "Open"));
  const body = h("tbody");
  const older = h("div", { class: "pager" });
  const follow = h("input", { type: "checkbox", id: "follow", checked: true });
  main.replaceChildren(h("h1", {}, "Log"), form, history, exporter,
    h("label", {}, follow, " follow live (newest on top)"),
    h("table", { id: "log" }, h("thead", {}, h("tr", {}, ["position", "time", "stream", "type",
      "state", "event"].map((c) => h("th", { scope: "col" }, c)))), body), older);
  const shown = new Set();
  const row = (e) => h("tr", { "data-position": e.position }, h("td", { class: "num" },
    String(e.position)), h("td", { class: "num" }, e.recorded_at), h("td", {},
    streamLink(e.stream_id)), h("td", {}, e.event_type), h("td", {}, stateBadge(e.state)),
  h("td", {}, jsonBlock(e.event, "payload")));
  const loadOlder = async (before) => {
    const page = await api(`/console/api/log${query({ before, kind: kinds.join(","), type,
      limit: 100 })}`);
    for (const e of page.events) {
      if (shown.has(e.position)) continue;
      shown.add(e.position);
      body.append(row(e));
    }
    older.replaceChildren(page.next ? h("button", { type: "button",
      onclick: () => loadOlder(page.next) }, "Older →") : h("span", { class: "muted" },
      "start of the log"));
  };
  await loadOlder(null);
  sub.start((e) => {
    if (!follow.checked || shown.has(e.position)) return;
    if (kinds.length && !kinds.includes(e.stream_id.split(":")[0])) return;
    if (type && e.event_type !== type) return;
    shown.add(e.position);
    // Newest on top, kept in position order even if a page load and the feed interleave.
    const next = [...body.children].find((tr) => Number(tr.dataset.position) < e.position);
    body.insertBefore(row(e), next || null);
    if (body.children.length > MAX_FOLLOWED) { // a tab left open for days stays light
      while (body.children.length > MAX_FOLLOWED) {
        shown.delete(Number(body.lastChild.dataset.position));
        body.lastChild.remove();
      }
      const oldest = Number(body.lastChild.dataset.position);
      older.replaceChildren(h("button", { type: "button", onclick: () => loadOlder(oldest) },
        "Older →"));
    }
  });
}

async function exportRange(first, last) {
  // Fetched with the token (a plain link could not send it), then saved from a blob URL.
  const path = `/console/api/export${query({ from: first, to: last })}`;
  const answer = await fetch(path, { headers: withToken(path) });
  if (!answer.ok) {
    notice(`export refused (${answer.status})`, false);
    return;
  }
  const url = URL.createObjectURL(await answer.blob());
  const link = h("a", { href: url, download: `foldline-${first}-${last}.jsonl` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// -- the token ----------------------------------------------------------------------------------

function askToken(view, message) {
  const input = h("input", { id: "token-prompt", type: "password", autocomplete: "off",
    spellcheck: "false", "aria-label": "operator token" });
  const form = h("form", { class: "filters", id: "token-form", onsubmit: (e) => {
    e.preventDefault();
    useToken(input.value.trim());
  } }, h("label", {}, "operator token ", input), h("button", { type: "submit" }, "Use"));
  view.replaceChildren(h("h1", {}, "This server needs the operator token"),
    h("p", {}, message), form, h("p", { class: "muted" }, "Kept in this tab only and sent as a ",
      "bearer header. `foldline token --workspace DIR` prints it; the server made it at its ",
      "first request, beside the log (the boot line says where)."));
}

function useToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
  document.getElementById("token").value = value;
  document.getElementById("notice").textContent = "";
  if (!app.machines.length) start().catch(failed); // the first load was refused
  else {
    feed.open();
    route();
  }
}

// -- routing ------------------------------------------------------------------------------------

let current = null; // the subscription of the page on screen

async function route() {
  const main = document.getElementById("main");
  const [path, search] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(search || "");
  const parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
  if (current) current.leave();
  const sub = subscription();
  current = sub;
  main.removeAttribute("data-ready");
  // Each page draws into its own element, shown only if no newer route started meanwhile.
  const view = h("div", { class: "page" });
  try {
    if (!parts.length) await pageOverview(view, sub);
    else if (KINDS[parts[0]] && parts.length === 1) await pageList(view, parts[0], params, sub);
    else if (TABLE_OF[parts[0]] && parts.length === 2) {
      await pageEntity(view, parts[0], parts[1], sub);
    } else if (parts[0] === "stream" && parts.length === 2) await pageStream(view, parts[1], sub);
    else if (parts[0] === "log") await pageLog(view, params, sub);
    else view.replaceChildren(h("h1", {}, "Not found"), h("p", {}, `no page ${location.hash}`));
  } catch (error) {
    sub.leave();
    const status = error.status ? `${error.status} ${error.code}: ` : "";
    if (error.status === 401) askToken(view, status + error.message);
    else {
      view.replaceChildren(h("h1", {}, "Could not load this page"),
        h("p", {}, status + error.message));
    }
  }
  if (current !== sub) return;
  main.replaceChildren(view);
  document.title = `foldline · ${parts[0] || "overview"}`;
  main.setAttribute("data-ready", String(Math.round(performance.now())));
}

async function start() {
  let machines, overview;
  const used = token();
  try {
    [machines, overview] = await Promise.all([api("/v1/machines"), api("/console/api/overview")]);
  } catch (error) {
    if (error.status !== 401) throw error;
    // A refusal of a token the user has replaced since: the newer token's own start answers.
    if (token() !== used) return;
    const main = document.getElementById("main");
    askToken(main, `${error.status} ${error.code}: ${error.message}`);
    main.setAttribute("data-ready", String(Math.round(performance.now())));
    return;
  }
  app.machines = machines;
  app.readOnly = overview.read_only;
  document.getElementById("token").placeholder = overview.token_required ? "required" : "not needed";
  feed.start(overview.head);
  window.addEventListener("hashchange", () => {
    document.getElementById("notice").textContent = "";
    route();
  });
  await route();
}

function failed(error) {
  notice(`the console could not start: ${error.message}`, false);
}

document.addEventListener("DOMContentLoaded", () => {
  // The skip link must not become a route: it moves the focus to the page's content.
  document.getElementById("skip").addEventListener("click", (event) => {
    event.preventDefault();
    document.getElementById("main").focus();
  });
  const field = document.getElementById("token");
  field.value = token();
  field.addEventListener("change", () => useToken(field.value.trim()));
  start().catch(failed);
});
