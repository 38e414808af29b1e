// The server state in the top bar (polled from /status) and the monitor view: state, prompt progress, speed,
// expert-cache hit rate and recent requests (from /status and /metrics).
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  let statusTimer = null;
  let monitorOpen = false;

  function authHeaders() {
    const settings = JSON.parse(localStorage.getItem("strata.settings.v1") || "{}");
    return settings.apiKey ? { Authorization: `Bearer ${settings.apiKey}` } : {};
  }

  async function getJson(path) {
    const response = await fetch(path, { headers: { Accept: "application/json", ...authHeaders() } });
    if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
    return response.json();
  }

  // The state word the page shows: idle / reading the prompt / answering (or whatever the server says).
  function stateOf(status) {
    return String(status.state ?? status.status ?? "unknown");
  }

  function stateClass(word) {
    if (/idle|ready/.test(word)) return "idle";
    if (/read|prompt|prefill/.test(word)) return "reading";
    if (/answer|generat|decod/.test(word)) return "answering";
    return "unknown";
  }

  function number(value, digits = 1) {
    return typeof value === "number" && isFinite(value) ? value.toFixed(digits) : "-";
  }

  function renderTopbar(status) {
    const word = stateOf(status);
    $("status-dot").className = `dot ${stateClass(word)}`;
    const speed = status.tokens_per_second;
    $("server-state").textContent = word + (typeof speed === "number" && speed > 0 ? ` · ${number(speed)} tok/s` : "");
  }

  function renderMonitor(status, metrics) {
    const word = stateOf(status);
    $("m-state").textContent = word;
    $("m-state").className = `big ${stateClass(word)}`;
    const reached = status.prompt_tokens_done;
    const total = status.prompt_tokens_total;
    const reading = total != null && !status.generated_tokens;
    const speed = reading ? status.prompt_tokens_per_second : status.tokens_per_second;
    $("m-speed").textContent = typeof speed === "number"
      ? `${number(speed)} tok/s${reading ? " (prompt)" : ""}`
      : `last: ${number(metrics?.recent?.at(-1)?.predicted_per_second)} tok/s`;
    $("m-tokens").textContent = String(status.generated_tokens ?? "-");
    const hits = metrics?.expert_cache_hit_rate ?? status.expert_cache_hit_rate;
    $("m-hits").textContent = typeof hits === "number" ? `${(hits * 100).toFixed(1)} %` : "not reported";
    const fraction = total ? Math.min(1, (reached || 0) / total) : 0;
    $("m-progress-bar").style.width = `${(fraction * 100).toFixed(1)}%`;
    $("m-progress-text").textContent = total ? `${reached || 0} of ${total} prompt tokens` : "no prompt being read";
    renderRequests(metrics?.recent ?? []);
    renderServer(metrics || {});
  }

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text ?? "-";
    row.append(td);
  }

  function renderRequests(requests) {
    const body = $("m-requests").querySelector("tbody");
    body.replaceChildren();
    for (const r of requests.slice().reverse().slice(0, 20)) {
      const row = document.createElement("tr");
      const when = r.time ?? r.started ?? r.timestamp;
      cell(row, typeof when === "number" ? new Date(when * 1000).toLocaleTimeString() : when);
      cell(row, r.seconds != null ? `${number(r.seconds)} s` : "-");
      cell(row, r.prompt_tokens);
      cell(row, r.reused_tokens ?? r.cached_tokens);
      cell(row, r.completion_tokens ?? r.generated_tokens);
      cell(row, number(r.prompt_per_second ?? r.prompt_tokens_per_second));
      cell(row, number(r.predicted_per_second ?? r.tokens_per_second));
      cell(row, r.finish_reason ?? r.finish);
      body.append(row);
    }
  }

  // Every plain (number or text) field of /metrics that the cards above do not show.
  function renderServer(metrics) {
    const body = $("m-server").querySelector("tbody");
    body.replaceChildren();
    for (const [key, value] of Object.entries(metrics)) {
      if (value === null || typeof value === "object") continue;
      const row = document.createElement("tr");
      cell(row, key.replace(/_/g, " "));
      cell(row, typeof value === "number" && !Number.isInteger(value) ? number(value, 3) : String(value));
      body.append(row);
    }
  }

  async function poll() {
    let status;
    try {
      status = await getJson("/status");
      renderTopbar(status);
    } catch (e) {
      $("status-dot").className = "dot down";
      $("server-state").textContent = "not reachable";
      return;
    }
    if (!monitorOpen) return;
    let metrics = null;
    try { metrics = await getJson("/metrics"); } catch (e) { /* shown without metrics */ }
    renderMonitor(status, metrics);
  }

  function schedule() {
    clearTimeout(statusTimer);
    statusTimer = setTimeout(async () => { await poll(); schedule(); }, monitorOpen ? 1000 : 2000);
  }

  function show() {
    monitorOpen = true;
    $("chat-view").hidden = true;
    $("monitor-view").hidden = false;
    poll();
    schedule();
  }

  function hide() {
    monitorOpen = false;
    $("monitor-view").hidden = true;
    $("chat-view").hidden = false;
  }

  function startStatusPolling() {
    poll();
    schedule();
  }

  window.StrataMonitor = { show, hide, startStatusPolling };
})();
