// kafka-audit dashboard: per-topic totals, and per partition a timeline drawn with plotly.js
// (served by the app). Reads /v1/topics (?system= when one system is picked), /v1/topics/{topic},
// and each partition's timeline and suspicions (writes suspected lost at a leader change, marked
// at the change). Its state is in the fragment: #system=rabbitmq&topic=<key>.
"use strict";

const TOKEN_KEY = "kafka-audit-token";
const LOSS = new Set(["lost", "lost_after_seen"]);
const WINDOW_COLORS = { exposure: "rgba(214,39,40,0.13)", split_brain: "rgba(148,103,189,0.18)",
  rejection: "rgba(255,127,14,0.15)", reduced_redundancy: "rgba(255,215,0,0.15)",
  leader_change: "rgba(31,119,180,0.15)" };
// the systems a topic key belongs to (the API's `system`), as the page names them
const SYSTEMS = new Map([["kafka", "Kafka"], ["rabbitmq", "RabbitMQ"]]);

function tokenFromFragment() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search
      + location.hash.replace(/(^#|&)token=[^&]+/, "$1").replace(/^#&?$/, ""));
  }
}

// a value of the fragment (#system=...&topic=...), decoded; null when absent
function fragment(name) {
  const m = new RegExp(`(?:^#|&)${name}=([^&]+)`).exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

// show another system or topic: the fragment says which, so a reload shows the same
function show(state) {
  location.hash = Object.entries(state).filter(([, v]) => v)
    .map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join("&");
  load();
}

class NeedToken extends Error {}

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch(path, { headers: token ? { Authorization: "Bearer " + token } : {} });
  if (r.status === 401 || r.status === 403) throw new NeedToken((await r.json()).detail);
  if (!r.ok) throw new Error(`${path}: ${r.status} ${(await r.text()).slice(0, 200)}`);
  return r.json();
}

// plotly.js reads markup in the text it draws (<b>, <a href>, <br> in hover text and
// annotations): a value from a record goes to it escaped, so it shows as the text it is.
// The page's own elements take values as text nodes (el() below), never as markup.
const plain = (v) => String(v).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const fmt = (n) => (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en-US");
const ms = (s) => Date.parse(s);
function clock(s) {
  if (!s) return "–";
  const d = new Date(ms(s));
  return d.toISOString().replace("T", " ").replace("Z", "").slice(0, 23);
}
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "onclick") e.onclick = v; else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function cell(value, cls) { return el("td", cls ? { class: cls } : {}, value); }

// a RabbitMQ key (rabbitmq:queue|stream:<vhost>:<name>, both percent-encoded: schemas/systems.py)
// as a person reads it, "queue orders (vhost /)"; a Kafka topic as its name
function topicLabel(key) {
  const m = /^rabbitmq:(queue|stream):([^:]*):([^:]+)$/.exec(key);
  if (!m) return key;
  try {
    return `${m[1]} ${decodeURIComponent(m[3])} (vhost ${decodeURIComponent(m[2])})`;
  } catch {
    return key;  // not encoded as a key is: shown as it is
  }
}

function renderTopics(topics, selected, system) {
  const body = document.querySelector("#topics tbody");
  body.replaceChildren();
  for (const t of topics) {
    const durability = t.durability.map((d) => `acks=${d.acks}${d.idempotence ? " idempotent" : ""}`
      + ` retries=${d.retries} in-flight=${d.max_in_flight} (${fmt(d.writes)})`).join("; ") || "–";
    const unjudged = Object.entries(t.unjudged_records).filter(([, n]) => n > 0)
      .map(([k, n]) => `${k} ${fmt(n)}`).join(", ") || "none";
    const row = el("tr", { class: "clickable" + (t.topic === selected ? " selected" : ""),
      onclick: () => show({ system, topic: t.topic }) },
      el("td", { class: "text", title: t.topic }, topicLabel(t.topic)),
      el("td", { class: "text" }, el("span", { class: "system " + t.system }, SYSTEMS.get(t.system) ?? t.system)),
      cell(fmt(t.acked)), cell(fmt(t.confirmed)), cell(fmt(t.pending)),
      cell(fmt(t.unseen), t.unseen ? "bad" : ""), cell(fmt(t.lost), t.lost ? "bad" : "ok"),
      cell(t.loss_ratio === null ? "–" : (100 * t.loss_ratio).toFixed(3) + " %"),
      cell(clock(t.last_loss), "text"), cell(durability, "text"), cell(unjudged, "text"));
    row.dataset.topic = t.topic;
    row.dataset.system = t.system;
    row.dataset.lost = t.lost;
    body.append(row);
  }
}

function renderPartitions(detail) {
  const title = document.getElementById("topic-title");
  title.textContent = `Partitions of ${topicLabel(detail.topic)}`;
  title.title = detail.topic;
  const body = document.querySelector("#partitions tbody");
  body.replaceChildren();
  for (const p of detail.partitions) {
    body.append(el("tr", {}, cell(p.partition, "text"), cell(fmt(p.acked)), cell(fmt(p.confirmed)),
      cell(fmt(p.lost), p.lost ? "bad" : "ok"), cell(fmt(p.pending)), cell(fmt(p.unseen)),
      cell(p.leader ?? "–"), cell(p.isr ? p.isr.join(", ") : "–"), cell(clock(p.last_loss), "text")));
  }
}

// a run (or a bucket) as a segment: (time, offset) to (end_time, last_offset), null-separated
function segments(spans) {
  const x = [], y = [];
  for (const s of spans) { x.push(ms(s.time), ms(s.end_time), null); y.push(s.offset, s.last_offset, null); }
  return { x, y };
}

function changeLabel(c) {
  if (c.kind === "offline") return `partition offline (leader ${c.previous_leader} lost)`;
  return `leader ${c.previous_leader ?? "?"} → ${c.leader}` + (c.leader_epoch !== null ? ` (epoch ${c.leader_epoch})` : "");
}

function drawTimeline(container, tl, suspicions) {
  const losses = tl.findings.filter((f) => LOSS.has(f.kind));
  const others = tl.findings.filter((f) => !LOSS.has(f.kind));
  const traces = [];
  const reads = segments(tl.reads);
  traces.push({ ...reads, name: "read by the consume job", mode: "lines", type: "scattergl",
    line: { color: "rgba(44,160,44,0.45)", width: 9 }, hoverinfo: "skip" });
  const acks = segments(tl.acks);
  traces.push({ ...acks, name: "acknowledged writes", mode: "lines", type: "scattergl",
    line: { color: "#1f5fbf", width: 2.5 }, hoverinfo: "skip" });
  if (tl.rereads.length) {
    traces.push({ x: tl.rereads.map((r) => ms(r.time)), y: tl.rereads.map((r) => r.offset),
      name: "re-read by the audit", mode: "markers", type: "scatter",
      marker: { symbol: "diamond-open", size: 9, color: "#444" },
      text: tl.rereads.map((r) => plain(`re-read offsets ${r.offset}..${r.last_offset}: ${r.status}`
        + (r.stamped_by ? ` (${r.stamped_by})` : ""))), hoverinfo: "text" });
  }
  if (losses.length) {
    const total = losses.reduce((n, f) => n + f.count, 0);
    const seg = segments(losses);
    traces.push({ ...seg, name: `lost writes (${fmt(total)})`, mode: "lines+markers", type: "scatter",
      line: { color: "#d0021b", width: 10 }, marker: { color: "#d0021b", size: 11, symbol: "x" },
      text: losses.flatMap((f) => { const t = plain(`${f.kind}${f.subkind ? "/" + f.subkind : ""}: offsets `
        + `${f.offset}..${f.last_offset} (${fmt(f.count)} writes), cause ${f.cause}`); return [t, t, null]; }),
      hoverinfo: "text" });
  }
  if (suspicions.length) {
    // suspected at the fail-over: each run of suspected writes at the moment of the change
    const total = suspicions.reduce((n, s) => n + s.count, 0);
    const x = [], y = [], text = [];
    for (const s of suspicions) {
      x.push(ms(s.changed_at), ms(s.changed_at), null);
      y.push(s.offset, s.offset + s.count - 1, null);
      const t = plain(`${fmt(s.count)} writes suspected at offsets ${s.offset}..${s.offset + s.count - 1}: `
        + `epoch ${s.leader_epoch} of leader ${s.old_leader} ends at ${s.end_offset} on leader ${s.new_leader ?? "?"}`
        + ` (by ${s.basis}); ${s.state}` + (s.why ? ` (${s.why})` : ""));
      text.push(t, t, null);
    }
    traces.push({ x, y, text, name: `suspected at the leader change (${fmt(total)})`, mode: "lines+markers",
      type: "scatter", line: { color: "#ff7f0e", width: 6 }, marker: { color: "#ff7f0e", size: 8, symbol: "line-ew" },
      hoverinfo: "text" });
  }
  if (others.length) {
    traces.push({ x: others.map((f) => ms(f.time)), y: others.map((f) => f.offset), name: "other findings",
      mode: "markers", type: "scatter", marker: { color: "#ff7f0e", size: 8, symbol: "triangle-up" },
      text: others.map((f) => plain(`${f.kind}${f.subkind ? "/" + f.subkind : ""}: ${fmt(f.count)} writes at ${f.offset}`)),
      hoverinfo: "text" });
  }
  if (tl.isr.length) {
    const end = ms(tl.until);
    traces.push({ x: [...tl.isr.map((p) => ms(p.time)), end], y: [...tl.isr.map((p) => p.size), tl.isr[tl.isr.length - 1].size],
      name: "ISR size", mode: "lines", line: { shape: "hv", color: "#6a3d9a", width: 2 },
      yaxis: "y2", type: "scatter", hoverinfo: "x+y" });
  }
  const shapes = [], annotations = [];
  for (const w of tl.windows || []) {
    // a leader change is often an instant (a clean hand-over): an edged band, no label (the
    // leader line shows who took over)
    const edge = w.kind === "leader_change" ? { width: 1, color: "rgba(31,119,180,0.6)" } : { width: 0 };
    shapes.push({ type: "rect", xref: "x", yref: "paper", x0: ms(w.start), x1: w.end ? ms(w.end) : ms(tl.until),
      y0: 0, y1: 1, fillcolor: WINDOW_COLORS[w.kind] || "rgba(127,127,127,0.15)", line: edge, layer: "below" });
    if (w.kind !== "leader_change") annotations.push({ x: ms(w.start), y: 0.02, xref: "x", yref: "paper", text: plain(w.kind), showarrow: false,
      xanchor: "left", font: { size: 11, color: "#555" } });
  }
  for (const g of tl.gaps) {
    shapes.push({ type: "rect", xref: "x", yref: "paper", x0: ms(g.start), x1: g.end ? ms(g.end) : ms(tl.until),
      y0: 0, y1: 1, fillcolor: "rgba(120,120,120,0.18)", line: { width: 0 }, layer: "below" });
    annotations.push({ x: ms(g.start), y: 0.97, xref: "x", yref: "paper", text: "watcher blind", showarrow: false,
      xanchor: "left", font: { size: 11, color: "#555" } });
  }
  tl.leader_changes.forEach((c, i) => {
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: ms(c.time), x1: ms(c.time), y0: 0, y1: 1,
      line: { color: "#6a3d9a", width: 2, dash: "dash" } });
    annotations.push({ x: ms(c.time), y: 1 - 0.07 * (i % 3), xref: "x", yref: "paper", text: plain(changeLabel(c)),
      showarrow: false, xanchor: "left", bgcolor: "rgba(255,255,255,0.85)", font: { size: 12, color: "#6a3d9a" } });
  });
  let range;
  if (losses.length) {  // open on the losses and the change that lost them; the button shows all
    const xs = losses.flatMap((f) => [ms(f.time), ms(f.end_time)]);
    losses.forEach((f) => { if (f.leader_change) xs.push(ms(f.leader_change)); });
    const lo = Math.min(...xs), hi = Math.max(...xs), pad = Math.max(1500, (hi - lo) * 0.6);
    range = [lo - pad, hi + pad];
  }
  let yrange;
  if (range) {  // offsets seen in that time range, so the losses are not a speck
    const ys = [];
    for (const s of [...tl.acks, ...tl.reads, ...losses]) {
      if (ms(s.end_time) >= range[0] && ms(s.time) <= range[1]) ys.push(s.offset, s.last_offset);
    }
    if (ys.length) {
      const lo = Math.min(...ys), hi = Math.max(...ys), pad = Math.max(5, (hi - lo) * 0.08);
      yrange = [lo - pad, hi + pad];
    }
  }
  const layout = {
    margin: { l: 70, r: 20, t: 30, b: 40 }, hovermode: "closest", showlegend: true,
    legend: { orientation: "h", y: 1.1, x: 0 },
    xaxis: { type: "date", title: { text: "time (UTC)" }, range, domain: [0, 1] },
    yaxis: { title: { text: "offset" }, domain: [0.3, 1], tickformat: ",d", range: yrange },
    yaxis2: { title: { text: "ISR size" }, domain: [0, 0.2], dtick: 1, rangemode: "tozero" },
    shapes, annotations,
    updatemenus: [{ type: "buttons", direction: "left", x: 1, xanchor: "right", y: 1.18, showactive: false,
      buttons: [{ label: "whole range", method: "relayout", args: [{ "xaxis.autorange": true, "yaxis.autorange": true }] }]
        .concat(range ? [{ label: "losses", method: "relayout", args: [{ "xaxis.range": range, "yaxis.range": yrange }] }] : []) }],
  };
  return Plotly.newPlot(container, traces, layout, { responsive: true, displaylogo: false });
}

function renderLosses(section, tl) {
  const losses = tl.findings.filter((f) => LOSS.has(f.kind));
  const total = losses.reduce((n, f) => n + f.count, 0);
  const head = el("div", { class: "headline" + (total ? "" : " clean"), "data-lost": total });
  if (!total) {
    head.textContent = "No acknowledged write lost in this range.";
    section.append(head);
    return;
  }
  const changes = new Map(tl.leader_changes.map((c) => [c.time, c]));
  const byChange = new Map();
  for (const f of losses) byChange.set(f.leader_change, (byChange.get(f.leader_change) || 0) + f.count);
  const causes = [...new Set(losses.map((f) => f.cause))].join("; ");
  const first = losses.reduce((a, f) => (ms(f.time) < ms(a.time) ? f : a));
  const last = losses.reduce((a, f) => (ms(f.end_time) > ms(a.end_time) ? f : a));
  const lines = [...byChange.entries()].map(([t, n]) => t
    ? `${fmt(n)} lost by the ${changeLabel(changes.get(t) || { kind: "leader_change", leader: "?" })} at ${clock(t)}`
    : `${fmt(n)} with no leader change recorded after them`);
  head.append(el("b", {}, `${fmt(total)} acknowledged writes lost`),
    ` (acked ${clock(first.time)} – ${clock(last.end_time)}, offsets ${first.offset}..${last.last_offset}): `
    + lines.join("; ") + `. Cause: ${causes}.`);
  section.append(head);
  const table = el("table", { class: "losses" }, el("thead", {}, el("tr", {},
    ...["verdict", "offsets", "writes", "acked at (UTC)", "cause", "lost by"].map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const f of losses.slice(0, 20)) {
    const c = f.leader_change && changes.get(f.leader_change);
    const row = el("tr", { class: "loss", "data-count": f.count },
      cell(`${f.kind}${f.subkind ? " / " + f.subkind : ""}`, "text"), cell(`${f.offset}..${f.last_offset}`),
      cell(fmt(f.count)), cell(clock(f.time), "text"), cell(f.cause ?? "–", "text"),
      cell(c ? `${changeLabel(c)} at ${clock(f.leader_change)}` : "–", "text"));
    body.append(row);
  }
  table.append(body);
  section.append(table);
  if (losses.length > 20) section.append(el("p", { class: "note" }, `… and ${losses.length - 20} more ranges`));
}

async function load() {
  const status = document.getElementById("status");
  try {
    const system = SYSTEMS.has(fragment("system")) ? fragment("system") : "";
    document.getElementById("system").value = system;
    const topics = await api("v1/topics" + (system ? "?system=" + system : ""));
    document.getElementById("login").hidden = true;
    document.getElementById("main").hidden = false;
    let asked = fragment("topic");
    if (asked && system && !topics.some((t) => t.topic === asked)) asked = null;  // another system's
    const lossy = topics.filter((t) => t.last_loss).sort((a, b) => ms(b.last_loss) - ms(a.last_loss));
    const topic = asked ?? (lossy[0] || topics[0] || {}).topic;
    renderTopics(topics, topic, system);
    const box = document.getElementById("timelines");
    box.replaceChildren();
    const which = system ? ` (${SYSTEMS.get(system)})` : "";
    if (!topic) {
      document.getElementById("topic-title").textContent = "Partitions";
      document.querySelector("#partitions tbody").replaceChildren();
      status.textContent = `no topic${which} audited yet`;
      document.body.dataset.ready = "yes";
      return;
    }
    const detail = await api("v1/topics/" + encodeURIComponent(topic));
    renderPartitions(detail);
    const parts = detail.partitions.filter((p) => p.partition >= 0)
      .sort((a, b) => (b.lost - a.lost) || (a.partition - b.partition)).slice(0, 12);
    for (const p of parts) {
      const tl = await api(`v1/partitions/${encodeURIComponent(topic)}/${p.partition}/timeline?points=800`);
      const sus = await api(`v1/suspicions?topic=${encodeURIComponent(topic)}&partition=${p.partition}&limit=1000`);
      const section = el("section", { class: "partition", "data-partition": p.partition,
        "data-suspected": sus.writes.suspected });
      section.append(el("h3", { title: topic }, `${topicLabel(topic)} partition ${p.partition}`
        + (tl.downsampled.length ? ` (downsampled: ${tl.downsampled.join(", ")})` : "")));
      renderLosses(section, tl);
      const chart = el("div", { class: "chart" });
      section.append(chart);
      box.append(section);
      await drawTimeline(chart, tl, sus.items);
    }
    const lost = topics.reduce((n, t) => n + t.lost, 0);
    status.textContent = `${topics.length} topics${which}, ${fmt(lost)} acknowledged writes lost · updated ${clock(new Date().toISOString())} UTC`;
    document.body.dataset.ready = "yes";
  } catch (e) {
    if (e instanceof NeedToken) {
      document.getElementById("main").hidden = true;
      document.getElementById("login").hidden = false;
      document.getElementById("login-error").textContent = sessionStorage.getItem(TOKEN_KEY) ? e.message : "";
      status.textContent = "a token is needed";
    } else {
      status.textContent = "error: " + e.message;
    }
    document.body.dataset.ready = "error";
  }
}

document.getElementById("system").addEventListener("change", (ev) => show({ system: ev.target.value }));
document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
  load();
});
tokenFromFragment();
load();
