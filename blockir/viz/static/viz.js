/* blockir pass visualizer: the page's script. Plain ES2020, no library, nothing fetched.

The data model is the JSON in #viz-data (blockir/viz/model.py documents it). Positions come from the
model (one layout for every state); this script never lays out. DOM contract (the browser tests use it):
  #passes li.state[data-state=K] (.selected, .failure), li.fold          the pass list
  svg#graph g.node[data-id][data-device] (.added .ghost .modified .moved .annotated .match .dim .selected
    .writer .reader .absent .feed .fetch .copy .control; text.t1-.t3 its label lines, title its whole label once the pointer is on it),
  path.edge[data-e] (title, once the pointer is on it: variable, dtype, shape; .hl), g.cluster[data-block], #labels span (op labels
  drawn over the graph below zoom 1), #minimap, #fit, #zoom-in, #zoom-out
  #diff-summary, #compare, #stats, #details (.text, .lineage, a.origin[data-id], a.var[data-var], .varinfo),
  #tabs button[data-tab=op|text], #program (#text-search, #text-count, .line.op[data-id] .add .mod .ann .del
  .sel .hit), #search, #search-count, #filter, #timeline rect.span[data-id] (.predicted: auto-place's schedule, in lanes
  labelled "predicted DEVICE" below the run's), #details .why, #heat, #error
window.vizView() = {x, y, k} (screen = graph * k + (x, y), in the graph's pixels).
window.vizTiming = {parsed, graph, state, drawn, interactive} (performance.now()); window.vizReady once painted. */
(() => {
  "use strict";
  const T0 = performance.now();
  const D = JSON.parse(document.getElementById("viz-data").textContent);
  const timing = (window.vizTiming = { parsed: performance.now() - T0 });
  const NS = "http://www.w3.org/2000/svg";
  // device colours: blues, teals, browns, pinks, greys; never the diff marks' green, red, amber or purple
  const PALETTE = ["#4e79a7", "#76b7b2", "#9c755f", "#d37295", "#79706e", "#a0cbe8", "#499894", "#d4a6c8"];
  const GLYPH = { added: "+", ghost: "−", modified: "~", moved: "→", annotated: "a" };
  const NSTATES = D.states.length;
  const FAIL = D.failure ? D.failure.index : -1; // the failure step's index in the pass list
  const $ = (sel, root = document) => root.querySelector(sel);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const fmt = (n) => Number(n).toLocaleString("en-US");

  // -- indices -------------------------------------------------------------------------------------------
  const ids = Object.keys(D.nodes).map(Number);
  const slot = new Map(ids.map((id, i) => [id, i])); // op id -> node index
  const byState = []; // state -> Int32Array node index -> version (-1: absent)
  for (let k = 0; k < NSTATES; k++) byState.push(new Int32Array(ids.length).fill(-1));
  for (const v of D.ops) {
    const i = slot.get(v.id);
    for (let k = 0; k < NSTATES; k++) if (v.present.charCodeAt(k) === 49) byState[k][i] = v.v;
  }
  const lastVersion = new Int32Array(ids.length).fill(-1); // what a node shows when absent from both states
  for (const v of D.ops) lastVersion[slot.get(v.id)] = v.v;
  const devIndex = new Map(D.devices.map((d, i) => [d, i]));
  const devColor = (d) => (d === "" ? "#bab0ac" : PALETTE[devIndex.get(d) % PALETTE.length]);
  const opTime = D.trace ? D.trace.op_time : {};
  const spansOf = new Map(); // op id -> span indices
  if (D.trace) D.trace.spans.forEach((s, j) => { if (s[3] >= 0) (spansOf.get(s[3]) || spansOf.set(s[3], []).get(s[3])).push(j); });
  const predictedOf = new Map(); // op id -> [its span in the schedule auto-place predicted, the span's index]
  const measuredSpans = D.trace ? D.trace.spans.length : 0; // the timeline draws the predicted spans after these
  if (D.predicted) D.predicted.spans.forEach((s, k) => predictedOf.set(s[3], [s, measuredSpans + k]));

  // -- the page ------------------------------------------------------------------------------------------
  const EMPTY = "Click an op to see its text form, attributes and lineage; click an edge or a variable to see who writes and reads it.";
  document.body.insertAdjacentHTML("afterbegin", `
<div id="app">
 <header>
  <h1>${esc(D.title)}</h1><span class="pipeline">${esc(D.pipeline || "(empty pipeline)")}</span>
  <input id="search" type="search" placeholder="search: type, variable, device:cpu:1, #id" aria-label="search">
  <span id="search-count"></span><label><input id="filter" type="checkbox"> filter</label>
  <span class="keys">j/k or ↑/↓ passes · / search · Enter or n next match · f fit · h home · Esc clear</span>
 </header>
 <aside id="side">
  <h2>Passes</h2><ul id="passes"></ul>
  <div id="diffbar">diff <span id="diff-summary"></span> vs <select id="compare"></select></div>
  <h2>Numbers</h2><div id="stats"></div>
  <h2>Legend</h2><div id="legend"></div>
 </aside>
 <div id="graph-wrap">
  <svg id="graph" xmlns="${NS}"><g id="viewport"><g id="clusters"></g><g id="edges"></g><g id="nodes"></g></g></svg>
  <div id="labels"></div>
  <div id="toolbar"><button id="fit" title="the whole graph (f)">fit</button><button id="zoom-in" title="zoom in">+</button><button id="zoom-out" title="zoom out">−</button></div>
  <canvas id="minimap" width="200" height="130" title="the whole graph: click or drag to move"></canvas>
  <div id="error"></div>
 </div>
 <section id="right">
  <div id="tabs"><button data-tab="op" class="on">op</button><button data-tab="text">program text</button></div>
  <div id="details"><div class="empty">${EMPTY}</div></div>
  <div id="program" hidden><div class="bar"><input id="text-search" type="search" placeholder="search the text" aria-label="search the text">` +
  `<span id="text-count"></span></div><div id="text-lines"></div></div>
 </section>
 <section id="timeline"></section>
</div>`);
  const svg = $("#graph"), viewport = $("#viewport");
  // The graph pane's rectangle, measured while the page is small (before the graph is drawn) and again after a
  // resize: reading it after the graph is drawn would lay out every node before the first paint does.
  let pane = null;
  const paneRect = () => pane || (pane = svg.getBoundingClientRect());
  window.addEventListener("resize", () => { pane = null; applyView(); });

  // -- drawing the graph (once) -----------------------------------------------------------------------------
  function nodeMarkup(i) {
    const id = ids[i], [x, y, w, h] = D.nodes[id], v = D.ops[lastVersion[i]];
    return `<g class="node" data-id="${id}" transform="translate(${x},${y})">` +
      `<rect class="halo" x="-4" y="-4" width="${w + 8}" height="${h + 8}"></rect><rect class="box" width="${w}" height="${h}"></rect>` +
      `<text class="t1" x="7" y="13"></text><text class="t2" x="7" y="27"></text><text class="t3" x="7" y="41"></text>` +
      `<text class="moved-tag" x="${w - 4}" y="-6" text-anchor="end"></text>` +
      `<g class="badge" transform="translate(${w - 3},3)"></g>` +
      `<text class="glyph" x="-4" y="0" text-anchor="middle"></text></g>`;
  }
  function clip(text, w) { // the text in w px of the 11px monospace font (6.6 px a character), "…" where cut
    const n = Math.max(4, Math.floor((w - 12) / 6.6));
    return text.length > n ? text.slice(0, n - 1) + "…" : text;
  }
  function varText(name, block) { // "x@GRAD: float32[-1, 8]", looked up in the block and its parents
    for (let b = block; b >= 0 && D.vars[b]; b = D.blocks[b].parent) {
      const v = D.vars[b][name];
      if (v) return `${name}: ${v[1] || "?"}${v[0] ? `[${v[0].join(", ")}]` : ""}${v[2] ? " persistable" : ""}`;
    }
    return name;
  }
  const nodeEls = [];
  const edgeEls = [];
  function drawGraph() {
    const nodesHtml = [];
    for (let i = 0; i < ids.length; i++) nodesHtml.push(nodeMarkup(i));
    $("#nodes").innerHTML = nodesHtml.join("");
    $("#nodes").querySelectorAll("g.node").forEach((g) => nodeEls.push(g));
    const edgesHtml = D.edges.map(([s, d], e) => {
      const a = D.nodes[s], b = D.nodes[d];
      if (!a || !b) return "";
      const x1 = a[0] + a[2] / 2, y1 = a[1] + a[3], x2 = b[0] + b[2] / 2, y2 = b[1];
      const c = Math.max(18, (y2 - y1) / 2);
      return `<path class="edge absent" data-e="${e}" d="M${x1},${y1}C${x1},${y1 + c} ${x2},${y2 - c} ${x2},${y2}"></path>`;
    });
    $("#edges").innerHTML = edgesHtml.join("");
    $("#edges").querySelectorAll("path").forEach((p) => (edgeEls[+p.dataset.e] = p));
    $("#clusters").innerHTML = D.blocks.map((b) => {
      if (!b.box || b.idx === 0) return "";
      const [x, y, w, h] = b.box, owner = b.owner != null ? D.ops[lastVersion[slot.get(b.owner)]] : null;
      const title = `▾ block ${b.idx}` + (owner ? ` (op ${owner.type} #${owner.id})` : "");
      return `<g class="cluster" data-block="${b.idx}"><rect class="frame" x="${x}" y="${y}" width="${w}" height="${h}"></rect>` +
        `<text x="${x + 8}" y="${y + 15}">${esc(title)}</text></g>`;
    }).join("");
  }
  function fillNode(i, v) { // the text of a node for version v
    const g = nodeEls[i], op = D.ops[v], w = D.nodes[ids[i]][2];
    const t = g.children, stream = op.stream ? op.stream.split("/").pop() : "", badgeW = stream ? 6.6 * stream.length + 8 : 0;
    t[2].textContent = clip(op.label[0], w - (stream ? badgeW + 4 : 0));
    t[3].textContent = clip(op.label[1] || "", w);
    t[4].textContent = clip(op.label[2] || "", w);
    g.dataset.device = op.device;
    g.dataset.v = v;
    const box = t[1];
    const color = heatOn ? heatColor(op.id) : devColor(op.device);
    box.style.stroke = heatOn ? "#bc4c00" : color;
    box.style.fill = heatOn ? color : tint(color);
    const badge = t[6];
    badge.innerHTML = stream ? `<rect x="${-badgeW}" y="0" width="${badgeW}" height="15" rx="7"></rect>` +
      `<text x="${-badgeW + 4}" y="11">${esc(stream)}</text>` : "";
    g.setAttribute("class", "node " + op.kind);
  }
  const tints = new Map();
  function tint(hex) {
    if (!tints.has(hex)) {
      const n = parseInt(hex.slice(1), 16), mix = (c) => Math.round(c + (255 - c) * 0.78);
      tints.set(hex, `rgb(${mix(n >> 16)},${mix((n >> 8) & 255)},${mix(n & 255)})`);
    }
    return tints.get(hex);
  }

  // -- states and the diff -----------------------------------------------------------------------------------
  let cur = -1, cmp = -1, cmpChoice = "prev", selected = null, selectedVar = null, heatOn = false;
  const shownState = (k) => (k === FAIL ? D.failure.received : k);
  function selectState(k) {
    if (k < 0 || k > (FAIL >= 0 ? FAIL : NSTATES - 1)) return;
    cur = k;
    const s = shownState(k);
    cmp = cmpChoice === "prev" ? Math.max(0, s - (k === FAIL ? 0 : 1)) : +cmpChoice;
    if (k === 0 && cmpChoice === "prev") cmp = 0;
    const A = byState[s], B = byState[cmp];
    let added = 0, removed = 0, modified = 0, moved = 0, annotated = 0;
    for (let i = 0; i < ids.length; i++) {
      const a = A[i], b = B[i], g = nodeEls[i];
      let status;
      if (a >= 0 && b < 0) { status = "added"; added++; }
      else if (a < 0 && b >= 0) { status = "ghost"; removed++; }
      else if (a < 0) status = "absent";
      else if (a !== b && D.ops[a].sv === D.ops[b].sv) { status = "annotated"; annotated++; } // stream, lineage
      else if (a !== b) {
        status = "modified"; modified++;
        if (D.ops[b].device && D.ops[a].device !== D.ops[b].device) { status = "moved"; moved++; } // "" -> d: placed
      } else status = "";
      const v = a >= 0 ? a : b >= 0 ? b : lastVersion[i];
      if (+g.dataset.v !== v || g.dataset.status !== status) {
        fillNode(i, v);
        if (status) g.classList.add(status);
        if (status === "moved") g.children[5].textContent = `${D.ops[b].device || "unplaced"} → ${D.ops[a].device}`;
        g.children[7].textContent = GLYPH[status] || "";
        g.dataset.status = status;
      }
      if (selected === ids[i]) g.classList.add("selected");
    }
    for (let e = 0; e < D.edges.length; e++) {
      const p = edgeEls[e];
      if (!p) continue;
      const pres = D.edges[e][3], inA = pres[s] === "1", inB = pres[cmp] === "1";
      p.setAttribute("class", "edge" + (inA ? "" : inB ? " ghost" : " absent"));
    }
    applyCollapsed();
    document.querySelectorAll("#passes li.state").forEach((li) => li.classList.toggle("selected", +li.dataset.state === k));
    const row = $(`#passes li.state[data-state="${k}"]`);
    if (row && row.classList.contains("hidden")) unfold(row.dataset.fold);
    $("#diff-summary").textContent = k === 0 && cmp === 0 ? "(input)" :
      `+${added} −${removed} ~${modified}` + (moved ? ` (moved ${moved})` : "") + ` · ${annotated} annotated`;
    drawStats(s);
    showError(k === FAIL);
    runSearch(false);
    if (selectedVar != null) selectVar(selectedVar);
    else if (selected != null) showDetails(selected);
    drawMinimap();
    if (!$("#program").hidden) drawText();
  }

  // -- the pass list ---------------------------------------------------------------------------------------------
  function passRow(st) {
    const counts = st.index === 0 ? `${fmt(st.ops)} ops` :
      `<span class="${st.changed ? "chg" : "unchg"}">${st.changed ? "changed" : "unchanged"}</span> · ` +
      `<span class="add">+${st.added}</span> <span class="rem">−${st.removed}</span> <span class="mod">~${st.structural}</span>` +
      ` <span class="ann">· ${st.annotated} annotated</span> · ${fmt(st.ops)} ops`;
    const ms = st.seconds == null ? "" : `${(st.seconds * 1e3).toFixed(2)} ms`;
    return `<div class="row1"><span class="idx">${st.index}</span><span class="label">${esc(st.label)}</span><span class="ms">${ms}</span></div>` +
      `<div class="row2">${counts}</div>`;
  }
  function drawPasses() {
    const html = [];
    let run = [];
    const flush = () => {
      if (run.length) {
        const f = run[0].index;
        const what = `${run.length} unchanged pass${run.length > 1 ? "es" : ""}`;
        html.push(`<li class="fold" data-fold="${f}">${what} (${run.map((s) => esc(s.name)).join(", ")}) ▸</li>`);
        for (const st of run) html.push(`<li class="state hidden" data-state="${st.index}" data-fold="${f}">${passRow(st)}</li>`);
      }
      run = [];
    };
    for (const st of D.states) {
      if (st.index > 0 && st.changed === false) { run.push(st); continue; }
      flush();
      html.push(`<li class="state" data-state="${st.index}">${passRow(st)}</li>`);
    }
    flush();
    if (D.failure) {
      html.push(`<li class="state failure" data-state="${FAIL}"><div class="row1"><span class="idx">${FAIL}</span>` +
        `<span class="label">${esc(D.failure.label)} — failed</span></div><div class="row2">raised; shows the program it received</div></li>`);
    }
    $("#passes").innerHTML = html.join("");
    const sel = $("#compare");
    sel.innerHTML = `<option value="prev">the previous pass</option>` +
      D.states.map((st) => `<option value="${st.index}">${st.index} ${esc(st.label)}</option>`).join("");
  }
  function unfold(f) {
    document.querySelectorAll(`#passes li[data-fold="${f}"]`).forEach((li) => li.classList.remove("hidden"));
    const fold = $(`#passes li.fold[data-fold="${f}"]`);
    if (fold) fold.remove();
  }

  // -- numbers, legend, error --------------------------------------------------------------------------------------
  function drawStats(s) {
    const st = D.states[s].stats;
    const rows = Object.entries(st.devices).map(([d, n]) =>
      `<tr data-device="${esc(d)}"><td><span class="sw" style="background:${devColor(d)}"></span>${esc(d || "unplaced")}</td><td class="n">${fmt(n)}</td></tr>`);
    const notes = D.states[s].notes.map((n) => `<div>${esc(n)}</div>`).join("");
    $("#stats").innerHTML = `<table><tr><td><b>ops per device</b></td><td></td></tr>${rows.join("")}` +
      `<tr><td>copies</td><td class="n copies">${fmt(st.copies)}</td></tr>` +
      `<tr><td>bytes crossing devices</td><td class="n bytes">${esc(st.copy_bytes)}</td></tr></table>` +
      (notes ? `<div class="notes">${notes}</div>` : "");
  }
  function drawLegend() {
    const devs = D.devices.map((d) => `<span><span class="sw" style="background:${devColor(d)}"></span>${esc(d || "unplaced")}</span>`);
    const marks = [["added", "added"], ["ghost", "removed (ghost)"], ["modified", "changed in structure"],
      ["moved", "moved device"], ["annotated", "annotations only (stream, lineage)"]]
      .map(([c, text]) => `<span><span class="mark ${c}">${GLYPH[c]}</span>${text}</span>`);
    marks.push(...[["#fff;border:2px dashed #57606a", "copy (memcpy)"], ["#fff;border:2px solid #57606a;border-radius:6px", "feed / fetch"]]
      .map(([style, text]) => `<span><span class="sw" style="background:${style}"></span>${text}</span>`));
    $("#legend").innerHTML = [...devs, ...marks, `<span><i style="color:#8250df">param / state</i>: persistable inputs</span>`].join("");
  }
  function showError(on) {
    const box = $("#error");
    box.classList.toggle("shown", on);
    if (on) box.innerHTML = `<b>pass ${esc(D.failure.label)} failed</b> (the graph is the program it received, after pass ${D.failure.received})` +
      `<pre>${esc(D.failure.message)}</pre><div>reproducer: <code>${esc(D.failure.reproducer)}</code></div>`;
  }

  // -- details and lineage ---------------------------------------------------------------------------------------------
  function versionIn(id, k) { const i = slot.get(id); return i == null ? -1 : byState[k][i]; }
  function showDetails(id) {
    const i = slot.get(id), s = shownState(cur);
    const v = byState[s][i] >= 0 ? byState[s][i] : byState[cmp][i] >= 0 ? byState[cmp][i] : lastVersion[i];
    const op = D.ops[v];
    const attrs = op.attrs.map(([k, val]) => `<tr><td>${esc(k)}</td><td><code>${esc(val)}</code></td></tr>`).join("");
    let lineage = "";
    if (op.pass) {
      const origins = op.origin.map((key, j) => op.origin_ids[j] != null ?
        `<a class="origin" data-id="${op.origin_ids[j]}">${esc(key)}</a>` : `<code>${esc(key)}</code> (not found)`).join(", ");
      lineage = `<div class="lineage">${esc(op.lineage)}<br>from: ${origins || "(nothing recorded)"}` +
        (op.bytes ? `<br>moves ${fmt(op.bytes[0])} B${" × (-1)".repeat(op.bytes[1])}` : "") + `</div>`;
    }
    const present = byState[s][i] >= 0 ? "" : byState[cmp][i] >= 0 ? " — removed by this pass (ghost)" : " — not in this pass's program";
    const before = byState[cmp][i], changes = [];
    if (byState[s][i] >= 0 && before >= 0 && before !== byState[s][i]) { // what changed since the compared pass
      const was = new Map(D.ops[before].attrs), now = new Map(op.attrs);
      for (const [k, val] of now) if (was.get(k) !== val) changes.push([k, was.has(k) ? was.get(k) : "(none)", val]);
      for (const [k, val] of was) if (!now.has(k)) changes.push([k, val, "(none)"]);
      if (!changes.length) changes.push(["text", D.ops[before].text, op.text]); // inputs or outputs renamed
    }
    const what = before >= 0 && D.ops[before].sv === op.sv ? "Annotations changed" : "Changed";
    const changed = changes.length ? `<h2 class="changed">${what} since pass ${cmp}</h2><table class="changes">` +
      changes.map(([k, a, b]) => `<tr><td>${esc(k)}</td><td><code>${esc(a)}</code> → <code>${esc(b)}</code></td></tr>`).join("") + `</table>` : "";
    let spans = "";
    if (D.trace) {
      const js = spansOf.get(id) || [];
      const total = js.reduce((a, j) => a + D.trace.spans[j][2], 0);
      spans = `<h2>In the run</h2><div class="spans">${js.length} span${js.length === 1 ? "" : "s"}, ${total.toFixed(1)} µs in all` +
        js.slice(0, 8).map((j) => `<div>${esc(D.trace.lanes[D.trace.spans[j][0]])}: at ${D.trace.spans[j][1].toFixed(1)} µs, ${D.trace.spans[j][2].toFixed(1)} µs</div>`).join("") + `</div>`;
    }
    const p = predictedOf.has(id) ? predictedOf.get(id)[0] : null, why = D.predicted && D.predicted.why[String(id)];
    if (p || why) { // auto-place's prediction beside the run's measurement, and its reasoning
      spans += `<h2>Predicted by auto-place</h2><div class="spans">` +
        (p ? `<div>${esc(D.predicted.lanes[p[0]])}: at ${p[1].toFixed(1)} µs, ${p[2].toFixed(1)} µs</div>` : "") +
        (why ? `<div class="why">${esc(why)}</div>` : "") + `</div>`;
    }
    const vars = (names, word) => names.map((n) => `<tr><td>${word}</td><td><a class="var" data-var="${esc(n)}">${esc(varText(n, op.block))}</a></td></tr>`).join("");
    $("#details").innerHTML = `<h2>Op #${op.id} · ${esc(op.type)}${present}</h2><pre class="text">${esc(op.text)}</pre>` + lineage +
      `<div class="facts">device <b>${esc(op.device || "unplaced")}</b> · stream <b>${esc(op.stream || "—")}</b> · block <b>${op.block}</b> · ${op.kind}</div>` +
      changed + `<h2>Variables</h2><table class="vars">${vars(op.inputs, "in") + vars(op.outputs, "out") || "<tr><td>(none)</td></tr>"}</table>` +
      `<h2>Attributes</h2><table>${attrs || "<tr><td>(none)</td></tr>"}</table>` + spans;
  }
  function clearHighlights() {
    if (selected != null && slot.has(selected)) nodeEls[slot.get(selected)].classList.remove("selected");
    document.querySelectorAll("#timeline rect.span.hl").forEach((r) => r.classList.remove("hl"));
    document.querySelectorAll("path.edge.hl").forEach((p) => p.classList.remove("hl"));
    document.querySelectorAll("g.node.writer, g.node.reader").forEach((g) => g.classList.remove("writer", "reader"));
    selected = null;
    selectedVar = null;
    markTextLine();
  }
  function select(id, center) {
    clearHighlights();
    selected = id;
    if (id == null) { $("#details").innerHTML = `<div class="empty">${EMPTY}</div>`; return; }
    const s = shownState(cur);
    if (versionIn(id, s) < 0 && versionIn(id, cmp) < 0) { // not on screen: go to a state that has it
      let k = -1;
      for (let j = s; j >= 0 && k < 0; j--) if (versionIn(id, j) >= 0) k = j;
      for (let j = s + 1; j < NSTATES && k < 0; j++) if (versionIn(id, j) >= 0) k = j;
      if (k >= 0) selectState(k);
    }
    const g = nodeEls[slot.get(id)];
    g.classList.add("selected");
    D.edges.forEach(([a, b], e) => { if ((a === id || b === id) && edgeEls[e]) edgeEls[e].classList.add("hl"); });
    [...(spansOf.get(id) || []), ...(predictedOf.has(id) ? [predictedOf.get(id)[1]] : [])].forEach((j) => { const r = spanEls[j]; if (r) r.classList.add("hl"); });
    showDetails(id);
    markTextLine(true);
    if (center) centerOn(id);
  }
  function selectVar(name) { // its writers and readers in the shown state, and its edges
    clearHighlights();
    selectedVar = name;
    const s = shownState(cur), writers = [], readers = [];
    let block = 0;
    for (let i = 0; i < ids.length; i++) {
      const v = byState[s][i];
      if (v < 0) continue;
      const op = D.ops[v];
      if (op.outputs.includes(name)) { writers.push(op); nodeEls[i].classList.add("writer"); block = op.block; }
      if (op.inputs.includes(name)) { readers.push(op); nodeEls[i].classList.add("reader"); block = writers.length ? block : op.block; }
    }
    D.edges.forEach(([, , n, pres], e) => { if (n === name && pres[s] === "1" && edgeEls[e]) edgeEls[e].classList.add("hl"); });
    const links = (ops) => ops.map((op) => `<a class="origin" data-id="${op.id}">#${op.id} ${esc(op.type)}</a>`).join(", ") || "none";
    $("#details").innerHTML = `<h2>Variable</h2><div class="varinfo"><code>${esc(varText(name, block))}</code>` +
      `<div>written by ${links(writers)}</div><div>read by ${links(readers)}</div></div>`;
    showTab("op");
  }

  // -- search and filter ------------------------------------------------------------------------------------------------
  let matches = [], matchAt = -1;
  function runSearch(jump) {
    const q = $("#search").value.trim().toLowerCase(), filter = $("#filter").checked, s = shownState(cur);
    matches = [];
    for (let i = 0; i < ids.length; i++) {
      const g = nodeEls[i], v = byState[s][i];
      let hit = false;
      if (q && v >= 0) {
        const op = D.ops[v];
        if (q.startsWith("device:")) hit = op.device.toLowerCase() === q.slice(7) || (q.slice(7) === "unplaced" && !op.device);
        else if (q.startsWith("#")) hit = String(op.id) === q.slice(1);
        else hit = op.type.toLowerCase().includes(q) || op.text.toLowerCase().includes(q) || op.device.toLowerCase() === q;
      }
      if (hit) matches.push(ids[i]);
      g.classList.toggle("match", hit);
      g.classList.toggle("dim", !!q && filter && !hit);
    }
    if (!q) { $("#search-count").textContent = ""; matchAt = -1; return; }
    if (jump && matches.length) { matchAt = (matchAt + 1) % matches.length; select(matches[matchAt], true); }
    $("#search-count").textContent = matches.length ? `${matchAt >= 0 ? matchAt + 1 : 0} of ${matches.length}` : "no match";
  }

  // -- pan and zoom -----------------------------------------------------------------------------------------------------
  // At zoom 1 the labels' 11px font is 11 px on screen: the page opens at zoom 1 or more. Below it the SVG's own
  // labels are hidden and #labels draws the op type, at 11 px, on each node on screen wide enough for it.
  const view = { x: 0, y: 0, k: 1 };
  window.vizView = () => ({ ...view });
  let viewQueued = false;
  function applyView() {
    viewport.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
    svg.classList.toggle("small", view.k < 0.999);
    if (!viewQueued) {
      viewQueued = true;
      requestAnimationFrame(() => { viewQueued = false; drawLabels(); drawMinimapView(); });
    }
  }
  function shownNode(i) { // drawn in the shown state (present, or a ghost of the compared one) and not folded away
    return (byState[shownState(cur)][i] >= 0 || byState[cmp][i] >= 0) && !nodeEls[i].classList.contains("collapsed");
  }
  function drawLabels() {
    const box = $("#labels");
    if (view.k >= 0.999) { box.innerHTML = ""; return; }
    const r = paneRect(), html = [];
    for (let i = 0; i < ids.length; i++) {
      const [x, y, w, h] = D.nodes[ids[i]], sx = view.x + x * view.k, sy = view.y + y * view.k, sw = w * view.k, sh = h * view.k;
      if (sx > r.width || sy > r.height || sx + sw < 0 || sy + sh < 0 || sh < 15 || !shownNode(i)) continue;
      const text = nodeEls[i].children[2].textContent.replace(/…$/, "");
      if (sw < text.length * 6.6 + 8) continue; // no room for the op type at 11 px
      html.push(`<span data-id="${ids[i]}" style="left:${(sx + 4).toFixed(1)}px;top:${(sy + (sh - 14) / 2).toFixed(1)}px">${esc(text)}</span>`);
    }
    box.innerHTML = html.join("");
  }
  function bounds() {
    let w = 0, h = 0;
    for (const id of ids) { const n = D.nodes[id]; w = Math.max(w, n[0] + n[2]); h = Math.max(h, n[1] + n[3]); }
    for (const b of D.blocks) if (b.box) { w = Math.max(w, b.box[0] + b.box[2]); h = Math.max(h, b.box[1] + b.box[3]); }
    return [w, h];
  }
  function fitZoom() {
    const [w, h] = bounds(), r = paneRect();
    return Math.min(2, (r.width - 40) / Math.max(w, 1), (r.height - 60) / Math.max(h, 1));
  }
  function fit() { // the whole graph, centred
    const [w, h] = bounds(), r = paneRect();
    view.k = Math.max(0.01, fitZoom());
    view.x = (r.width - w * view.k) / 2;
    view.y = 44 + Math.max(0, (r.height - 60 - h * view.k) / 2);
    applyView();
  }
  function home() { // the larger of the fit zoom and zoom 1, at the start of the graph (its feeds)
    const [w, h] = bounds(), r = paneRect();
    if (fitZoom() >= 1) { fit(); return; }
    view.k = 1;
    const s = shownState(cur), feeds = [];
    for (let i = 0; i < ids.length; i++) if (byState[s][i] >= 0 && D.ops[byState[s][i]].kind === "feed") feeds.push(D.nodes[ids[i]]);
    const left = feeds.length ? Math.min(...feeds.map((n) => n[0])) : 0, top = feeds.length ? Math.min(...feeds.map((n) => n[1])) : 0;
    view.x = w <= r.width - 40 ? (r.width - w) / 2 : 20 - left;
    view.y = h <= r.height - 60 ? 44 : 44 - top;
    applyView();
  }
  function visibleCentre() { // the screen centre of the part of the graph on screen (the pane's centre if none is)
    const [w, h] = bounds(), r = paneRect();
    const x0 = Math.max(0, view.x), x1 = Math.min(r.width, view.x + w * view.k);
    const y0 = Math.max(0, view.y), y1 = Math.min(r.height, view.y + h * view.k);
    return x1 > x0 && y1 > y0 ? [(x0 + x1) / 2, (y0 + y1) / 2] : [r.width / 2, r.height / 2];
  }
  function zoomAt(px, py, factor) {
    const k = Math.min(4, Math.max(0.01, view.k * factor));
    view.x = px - (px - view.x) * (k / view.k);
    view.y = py - (py - view.y) * (k / view.k);
    view.k = k;
    applyView();
  }
  function centerOn(id) {
    const [x, y, w, h] = D.nodes[id], r = paneRect();
    if (view.k < 1) view.k = 1; // labels readable
    view.x = r.width / 2 - (x + w / 2) * view.k;
    view.y = r.height / 2 - (y + h / 2) * view.k;
    applyView();
  }
  let drag = null;
  svg.addEventListener("pointerdown", (e) => { drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, moved: false }; });
  window.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) { drag.moved = true; svg.classList.add("dragging"); }
    view.x = drag.vx + dx; view.y = drag.vy + dy;
    applyView();
  });
  window.addEventListener("pointerup", () => { setTimeout(() => (drag = null), 0); svg.classList.remove("dragging"); });
  svg.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = paneRect();
    zoomAt(e.clientX - r.left, e.clientY - r.top, Math.exp(-e.deltaY * 0.0015));
  }, { passive: false });
  svg.addEventListener("mouseover", (e) => { // the tooltip of what the pointer rests on, made when it arrives
    const target = e.target.closest("path.edge, g.node");
    if (!target) return;
    let text;
    if (target.tagName === "path") {
      const [src, , name] = D.edges[+target.dataset.e];
      text = varText(name, D.nodes[src][4]);
    } else {
      const op = D.ops[+target.dataset.v];
      text = op.label.filter((line) => line).join("\n") + `\n${op.device || "unplaced"}${op.stream ? " · " + op.stream : ""}`;
    }
    const title = target.querySelector(":scope > title") || target.appendChild(document.createElementNS(NS, "title"));
    title.textContent = text;
  });
  svg.addEventListener("click", (e) => {
    if (drag && drag.moved) return;
    const title = e.target.closest("g.cluster text");
    if (title) { toggleCluster(+title.parentNode.dataset.block); return; }
    const edge = e.target.closest("path.edge");
    if (edge) { selectVar(D.edges[+edge.dataset.e][2]); return; }
    const g = e.target.closest("g.node");
    select(g ? +g.dataset.id : null, false);
  });

  // -- sub-blocks -----------------------------------------------------------------------------------------------------------
  const collapsed = new Set();
  function toggleCluster(b) {
    if (collapsed.has(b)) collapsed.delete(b); else collapsed.add(b);
    const c = $(`g.cluster[data-block="${b}"]`), box = D.blocks[b].box;
    c.classList.toggle("collapsed", collapsed.has(b));
    c.querySelector("rect").setAttribute("height", collapsed.has(b) ? 24 : box[3]);
    const t = c.querySelector("text");
    t.textContent = (collapsed.has(b) ? "▸" : "▾") + t.textContent.slice(1);
    applyCollapsed();
    applyView();
  }
  function inCollapsed(id) {
    let b = D.nodes[id][4];
    while (b > 0) { if (collapsed.has(b)) return true; b = D.blocks[b].parent; }
    return false;
  }
  function applyCollapsed() {
    if (!D.blocks.some((b) => b.idx > 0 && b.box)) return;
    for (let i = 0; i < ids.length; i++) nodeEls[i].classList.toggle("collapsed", inCollapsed(ids[i]));
    D.edges.forEach(([a, b], e) => { if (edgeEls[e]) edgeEls[e].classList.toggle("collapsed", inCollapsed(a) || inCollapsed(b)); });
  }

  // -- the run: timeline and heat -------------------------------------------------------------------------------------------
  const spanEls = [];
  let heatMax = 0;
  function heatColor(id) {
    const t = opTime[String(id)];
    if (!t || !heatMax) return "#f6f8fa";
    const f = Math.log1p(t) / Math.log1p(heatMax); // 0..1
    const stops = [[255, 255, 204], [253, 141, 60], [189, 0, 38]];
    const [a, b, u] = f < 0.5 ? [stops[0], stops[1], f * 2] : [stops[1], stops[2], (f - 0.5) * 2];
    return `rgb(${a.map((c, j) => Math.round(c + (b[j] - c) * u)).join(",")})`;
  }
  function drawTimeline() {
    const P = D.predicted, box = $("#timeline");
    const T = D.trace || { spans: [], lanes: [], end: 0 }; // a page without a run may still show the prediction
    if (!D.trace && !P) return;
    box.classList.add("shown");
    heatMax = Math.max(0, ...Object.values(opTime));
    let head = "";
    if (D.trace) {
      const how = { compiled: "the run's program is this pass's program", program: `the run compiled this input with ${T.ran.pipeline || "another pipeline"}`, ops: "matched by the op ids it names" }[T.match];
      head = `<b>Run</b> ${esc(T.file)} · ${fmt(T.spans.length)} spans, ${(T.end / 1e3).toFixed(2)} ms · linked to pass ${T.state} (${esc(D.states[T.state].label)}): ${esc(how)}` +
        (T.unlinked ? ` · ${T.unlinked} unlinked` : "") +
        ` <label><input id="heat" type="checkbox"> heat (time per op)</label><span id="heat-legend">0 <span class="ramp"></span> ${heatMax.toFixed(0)} µs</span>`;
    }
    if (P) head += ` <b>Predicted</b> by pass ${P.state} (${esc(D.states[P.state].label)}): ${(P.makespan / 1e3).toFixed(2)} ms`;
    box.innerHTML = `<div class="head">${head}</div><svg id="lanes"></svg>`;
    // the run's lanes, then auto-place's predicted lanes below them on the same time axis
    const all = T.spans.concat(P ? P.spans.map(([lane, ts, dur, op, name]) => [T.lanes.length + lane, ts, dur, op, name, true]) : []);
    const laneNames = T.lanes.concat(P ? P.lanes.map((l) => `predicted ${l}`) : []);
    const lanes = $("#lanes"), W = lanes.getBoundingClientRect().width || 800, LABEL = 130, ROW = 20;
    let scale = (W - LABEL - 10) / Math.max(T.end, P ? P.makespan : 0, 1), offset = 0;
    const rects = all.map(([lane, ts, dur, op, name, predicted], j) =>
      `<rect class="span${name === "memcpy" ? " copy" : ""}${op < 0 ? " unlinked" : ""}${predicted ? " predicted" : ""}" data-j="${j}" data-id="${op}" y="${lane * ROW + 4}" height="${ROW - 6}"><title>${predicted ? "predicted: " : ""}${esc(name)} #${op} · ${dur.toFixed(1)} µs</title></rect>`);
    lanes.innerHTML = laneNames.map((l, i) => `<text class="lane-label" x="4" y="${i * ROW + 16}">${esc(l)}</text>`).join("") +
      `<g id="spans" transform="translate(${LABEL},0)">${rects.join("")}</g>`;
    lanes.style.height = `${laneNames.length * ROW + 8}px`; // as tall as its lanes: the graph keeps the rest
    lanes.querySelectorAll("rect.span").forEach((r) => (spanEls[+r.dataset.j] = r));
    const place = () => all.forEach(([, ts, dur], j) => {
      spanEls[j].setAttribute("x", (ts - offset) * scale);
      spanEls[j].setAttribute("width", Math.max(1, dur * scale));
    });
    place();
    lanes.addEventListener("wheel", (e) => {
      e.preventDefault();
      const px = e.clientX - lanes.getBoundingClientRect().left - LABEL, at = offset + px / scale;
      scale *= Math.exp(-e.deltaY * 0.002);
      offset = Math.max(0, at - px / scale);
      place();
    }, { passive: false });
    lanes.addEventListener("click", (e) => {
      const r = e.target.closest("rect.span");
      if (!r || +r.dataset.id < 0) return;
      const state = r.classList.contains("predicted") ? P.state : T.state;
      if (shownState(cur) !== state && versionIn(+r.dataset.id, shownState(cur)) < 0) selectState(state);
      select(+r.dataset.id, true);
    });
    if (D.trace) $("#heat").addEventListener("change", (e) => {
      heatOn = e.target.checked;
      $("#heat-legend").classList.toggle("shown", heatOn);
      nodeEls.forEach((g) => { g.dataset.v = -2; }); // repaint every node
      selectState(cur);
    });
  }

  // -- the minimap -------------------------------------------------------------------------------------------------------------
  function minimapScale() {
    const [w, h] = bounds(), k = Math.min((minimap.width - 8) / Math.max(w, 1), (minimap.height - 8) / Math.max(h, 1));
    return { k, ox: (minimap.width - w * k) / 2, oy: (minimap.height - h * k) / 2 };
  }
  let minimapImage = null;
  function drawMinimap() { // the nodes of the shown state, in their device's colour (redrawn with the state)
    const c = minimap.getContext("2d"), m = minimapScale();
    c.clearRect(0, 0, minimap.width, minimap.height);
    for (let i = 0; i < ids.length; i++) {
      if (!shownNode(i)) continue;
      const [x, y, w, h] = D.nodes[ids[i]], v = byState[shownState(cur)][i];
      c.fillStyle = v >= 0 ? devColor(D.ops[v].device) : "#cf222e";
      c.fillRect(m.ox + x * m.k, m.oy + y * m.k, Math.max(1, w * m.k), Math.max(1, h * m.k));
    }
    minimapImage = c.getImageData(0, 0, minimap.width, minimap.height);
    drawMinimapView();
  }
  function drawMinimapView() { // the part on screen, as a rectangle; the minimap shows only when the graph does not fit
    if (!minimapImage) return;
    const [w, h] = bounds(), g = paneRect();
    const all = view.x >= -1 && view.y >= -1 && view.x + w * view.k <= g.width + 1 && view.y + h * view.k <= g.height + 1;
    minimap.classList.toggle("shown", !all);
    const c = minimap.getContext("2d"), m = minimapScale();
    c.putImageData(minimapImage, 0, 0);
    c.strokeStyle = "#0969da";
    c.lineWidth = 1.5;
    c.strokeRect(m.ox + (-view.x / view.k) * m.k, m.oy + (-view.y / view.k) * m.k, (g.width / view.k) * m.k, (g.height / view.k) * m.k);
  }

  // -- the program as text -------------------------------------------------------------------------------------------------------
  function showTab(tab) {
    document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("on", b.dataset.tab === tab));
    $("#details").hidden = tab !== "op";
    const program = $("#program"), opening = program.hidden && tab === "text";
    program.hidden = tab !== "text";
    if (opening) drawText();
  }
  function drawText() { // the shown state's text form; ops marked by the diff against the compared state, removed ops in place
    const s = shownState(cur), lines = [];
    const opLine = (v, cls) => {
      const op = D.ops[v];
      return `<div class="line op ${cls}" data-id="${op.id}">  ${esc(op.text)}</div>`;
    };
    const removed = new Map(); // op id present before (in cmp) -> removed ops that followed it there
    if (cmp !== s) {
      let after = -1;
      for (const entry of D.states[cmp].text) {
        if (entry < 0) continue;
        const id = D.ops[entry].id;
        if (versionIn(id, s) >= 0) after = id;
        else (removed.get(after) || removed.set(after, []).get(after)).push(entry);
      }
    }
    const ghosts = (id) => (removed.get(id) || []).map((v) => opLine(v, "del")).join("");
    lines.push(ghosts(-1));
    for (const entry of D.states[s].text) {
      if (entry < 0) { lines.push(`<div class="line">${esc(D.lines[-1 - entry])}</div>`); continue; }
      const op = D.ops[entry], before = versionIn(op.id, cmp);
      const cls = cmp === s ? "" : before < 0 ? "add" : before === entry ? "" : D.ops[before].sv === op.sv ? "ann" : "mod";
      lines.push(opLine(entry, cls) + ghosts(op.id));
    }
    $("#text-lines").innerHTML = lines.join("");
    searchText(false);
    markTextLine(true);
  }
  function markTextLine(scroll) { // the selected op's line
    if ($("#program").hidden) return;
    document.querySelectorAll("#text-lines .line.sel").forEach((l) => l.classList.remove("sel"));
    if (selected == null) return;
    const line = $(`#text-lines .line.op[data-id="${selected}"]:not(.del)`) || $(`#text-lines .line.op[data-id="${selected}"]`);
    if (!line) return;
    line.classList.add("sel");
    if (scroll) line.scrollIntoView({ block: "nearest" });
  }
  let textAt = -1;
  function searchText(jump) {
    const q = $("#text-search").value.trim().toLowerCase(), hits = [];
    document.querySelectorAll("#text-lines .line").forEach((l) => {
      const hit = !!q && l.textContent.toLowerCase().includes(q);
      l.classList.toggle("hit", hit);
      if (hit) hits.push(l);
    });
    if (jump && hits.length) { textAt = (textAt + 1) % hits.length; hits[textAt].scrollIntoView({ block: "center" }); }
    $("#text-count").textContent = !q ? "" : hits.length ? `${textAt >= 0 ? textAt + 1 : 0} of ${hits.length}` : "no match";
  }

  // -- keys and controls ------------------------------------------------------------------------------------------------------
  document.addEventListener("keydown", (e) => {
    const inSearch = e.target === $("#search");
    if (!inSearch && e.target.closest && e.target.closest("select, input")) return; // the control's own keys
    if (inSearch) {
      if (e.key === "Enter") { e.preventDefault(); runSearch(true); }
      if (e.key === "Escape") { e.target.blur(); }
      return;
    }
    const last = FAIL >= 0 ? FAIL : NSTATES - 1;
    if (e.key === "ArrowDown" || e.key === "j") { e.preventDefault(); selectState(Math.min(last, cur + 1)); }
    else if (e.key === "ArrowUp" || e.key === "k") { e.preventDefault(); selectState(Math.max(0, cur - 1)); }
    else if (e.key === "f") fit();
    else if (e.key === "h") home();
    else if (e.key === "n") runSearch(true);
    else if (e.key === "/") { e.preventDefault(); $("#search").focus(); }
    else if (e.key === "Escape") select(null, false);
  });
  $("#passes").addEventListener("click", (e) => {
    const fold = e.target.closest("li.fold");
    if (fold) { unfold(fold.dataset.fold); return; }
    const li = e.target.closest("li.state");
    if (li) selectState(+li.dataset.state);
  });
  $("#details").addEventListener("click", (e) => {
    const a = e.target.closest("a.origin");
    if (a) select(+a.dataset.id, true);
  });
  $("#compare").addEventListener("change", (e) => { cmpChoice = e.target.value; selectState(cur); });
  $("#search").addEventListener("input", () => { matchAt = -1; runSearch(false); });
  $("#filter").addEventListener("change", () => runSearch(false));
  $("#fit").addEventListener("click", fit);
  $("#zoom-in").addEventListener("click", () => zoomAt(...visibleCentre(), 1.4));
  $("#zoom-out").addEventListener("click", () => zoomAt(...visibleCentre(), 1 / 1.4));
  $("#tabs").addEventListener("click", (e) => { const b = e.target.closest("button"); if (b) showTab(b.dataset.tab); });
  $("#details").addEventListener("click", (e) => { const a = e.target.closest("a.var"); if (a) selectVar(a.dataset.var); });
  $("#text-lines").addEventListener("click", (e) => { const line = e.target.closest(".line.op"); if (line) { select(+line.dataset.id, true); showTab("text"); } });
  $("#text-search").addEventListener("input", () => { textAt = -1; searchText(false); });
  $("#text-search").addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); searchText(true); } });
  const minimap = $("#minimap");
  const fromMinimap = (e) => { // centre the view on the graph point under the pointer
    const m = minimapScale(), r = minimap.getBoundingClientRect(), g = paneRect();
    view.x = g.width / 2 - ((e.clientX - r.left - m.ox) / m.k) * view.k;
    view.y = g.height / 2 - ((e.clientY - r.top - m.oy) / m.k) * view.k;
    applyView();
  };
  let miniDrag = false;
  minimap.addEventListener("pointerdown", (e) => { miniDrag = true; minimap.setPointerCapture(e.pointerId); fromMinimap(e); e.stopPropagation(); });
  minimap.addEventListener("pointermove", (e) => { if (miniDrag) fromMinimap(e); });
  minimap.addEventListener("pointerup", () => { miniDrag = false; });

  // -- start -----------------------------------------------------------------------------------------------------------------------
  drawPasses();
  drawLegend();
  drawTimeline();
  paneRect();
  drawGraph();
  timing.graph = performance.now();
  const first = D.states.findIndex((s, k) => k > 0 && s.changed);
  selectState(first > 0 ? first : NSTATES > 1 ? 1 : 0);
  timing.state = performance.now();
  home();
  timing.drawn = performance.now();
  requestAnimationFrame(() => requestAnimationFrame(() => {
    timing.interactive = performance.now();
    window.vizReady = true;
  }));
})();
