// The chat page: chats kept in localStorage, streamed answers from /v1/chat/completions (thinking shown while it
// streams, then folded), stop, pictures when /health says images are on, thinking level and sampling settings.
// The monitor view is in monitor.js; markdown rendering in markdown.js.
"use strict";

const { renderMarkdown } = window.StrataMarkdown;
const STORE_CHATS = "strata.chats.v1";
const STORE_SETTINGS = "strata.settings.v1";
const SAMPLING_FIELDS = ["temperature", "top_p", "top_k", "min_p", "presence_penalty", "seed", "max_tokens"];
const $ = (id) => document.getElementById(id);
const messageElements = new WeakMap();   // message object -> its element (kept out of the stored JSON)

const state = {
  chats: loadJson(STORE_CHATS, []),
  currentId: null,
  settings: loadJson(STORE_SETTINGS, { thinking: "", sampling: {}, apiKey: "" }),
  health: null,
  pendingImages: [],          // data: URLs attached to the next message
  streaming: null,            // { controller, chat, message } while an answer streams
};

function loadJson(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value ?? fallback;
  } catch (e) {
    return fallback;
  }
}

function saveChats() {
  try {
    localStorage.setItem(STORE_CHATS, JSON.stringify(state.chats));
  } catch (e) {
    // Browser storage is small (about 5 MB): drop pictures from stored chats, oldest first, and try again.
    for (const chat of state.chats.slice().reverse()) {
      for (const m of chat.messages) m.images = [];
      try { localStorage.setItem(STORE_CHATS, JSON.stringify(state.chats)); return; } catch (e2) { /* go on */ }
    }
    showBanner("This browser's storage is full; older chats could not be saved.");
  }
}

function saveSettings() { localStorage.setItem(STORE_SETTINGS, JSON.stringify(state.settings)); }

function showBanner(text) {
  const banner = $("banner");
  banner.textContent = text;
  banner.hidden = !text;
}

function authHeaders() {
  return state.settings.apiKey ? { Authorization: `Bearer ${state.settings.apiKey}` } : {};
}

// ---- chats ----

function currentChat() { return state.chats.find(c => c.id === state.currentId) || null; }

function newChat() {
  const chat = { id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`, title: "New chat",
                 created: Date.now(), messages: [] };
  state.chats.unshift(chat);
  state.currentId = chat.id;
  saveChats();
  renderAll();
  $("prompt").focus();
  return chat;
}

function selectChat(id) {
  if (state.streaming) return;
  state.currentId = id;
  renderAll();
}

function deleteChat(id) {
  if (state.streaming && state.streaming.chat.id === id) return;
  state.chats = state.chats.filter(c => c.id !== id);
  if (state.currentId === id) state.currentId = state.chats[0]?.id ?? null;
  saveChats();
  renderAll();
}

// ---- rendering ----

function renderChatList() {
  const list = $("chat-list");
  list.replaceChildren();
  for (const chat of state.chats) {
    const item = document.createElement("div");
    item.className = "chat-item" + (chat.id === state.currentId ? " active" : "");
    const title = document.createElement("button");
    title.className = "chat-title";
    title.textContent = chat.title;
    title.title = chat.title;
    title.onclick = () => selectChat(chat.id);
    const remove = document.createElement("button");
    remove.className = "chat-delete";
    remove.textContent = "×";
    remove.title = "delete this chat";
    remove.onclick = () => deleteChat(chat.id);
    item.append(title, remove);
    list.append(item);
  }
}

function messageElement(message) {
  const el = document.createElement("div");
  el.className = `message ${message.role}`;
  fillMessage(el, message);
  return el;
}

function fillMessage(el, message) {
  el.replaceChildren();
  if (message.images?.length) {
    const pics = document.createElement("div");
    pics.className = "pictures";
    for (const url of message.images) {
      const img = document.createElement("img");
      img.src = url;
      img.alt = "attached picture";
      pics.append(img);
    }
    el.append(pics);
  }
  if (message.role === "user") {
    const body = document.createElement("div");
    body.className = "body";
    body.textContent = message.content;
    el.append(body);
    return;
  }
  if (message.reasoning) {
    const details = document.createElement("details");
    details.className = "thinking";
    details.open = message.thinkingPinned ?? message.thinkingOpen === true;
    const summary = document.createElement("summary");
    const stillThinking = message.pending && !message.content;
    summary.textContent = stillThinking ? "Thinking ..." : `Thought (${wordCount(message.reasoning)} words)`;
    // Only a click by the user pins it open or shut; the page itself folds it when the answer starts.
    summary.addEventListener("click", () => { message.thinkingPinned = !details.open; });
    const body = document.createElement("div");
    body.className = "thinking-body";
    body.textContent = message.reasoning;
    details.append(summary, body);
    el.append(details);
  }
  const body = document.createElement("div");
  body.className = "body";
  body.innerHTML = renderMarkdown(message.content || "");
  if (message.pending && !message.content && !message.reasoning) {
    body.innerHTML = '<span class="typing">waiting for the model ...</span>';
  }
  el.append(body);
  if (message.toolCalls?.length) {
    for (const call of message.toolCalls) {
      const pre = document.createElement("pre");
      pre.className = "tool-call";
      pre.textContent = `tool call: ${call.name}(${call.arguments})`;
      el.append(pre);
    }
  }
  if (message.error) {
    const err = document.createElement("div");
    err.className = "error";
    err.textContent = message.error;
    el.append(err);
  }
  const info = statsText(message);
  if (info) {
    const stats = document.createElement("div");
    stats.className = "stats";
    stats.textContent = info;
    el.append(stats);
  }
}

function wordCount(text) { return text.trim() ? text.trim().split(/\s+/).length : 0; }

function statsText(message) {
  const parts = [];
  if (message.stopped) parts.push("stopped");
  const s = message.stats;
  if (s) {
    if (s.completion_tokens != null) parts.push(`${s.completion_tokens} tokens`);
    if (s.predicted_per_second) parts.push(`${s.predicted_per_second.toFixed(1)} tok/s`);
    if (s.prompt_tokens != null) parts.push(`prompt ${s.prompt_tokens} tokens` +
      (s.cached_tokens ? ` (${s.cached_tokens} reused)` : ""));
    if (s.finish_reason && s.finish_reason !== "stop") parts.push(`ended: ${s.finish_reason}`);
  }
  return parts.join(" · ");
}

function renderMessages() {
  const box = $("messages");
  box.replaceChildren();
  const chat = currentChat();
  if (!chat || !chat.messages.length) {
    const empty = document.createElement("div");
    empty.className = "empty";
    empty.textContent = state.health?.model ? `Ask ${state.health.model} anything.` : "Ask anything.";
    box.append(empty);
    return;
  }
  for (const message of chat.messages) {
    const el = messageElement(message);
    messageElements.set(message, el);
    box.append(el);
  }
  box.scrollTop = box.scrollHeight;
}

function renderComposer() {
  const busy = !!state.streaming;
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  $("attach").hidden = !state.health?.images;
  const box = $("attachments");
  box.replaceChildren();
  state.pendingImages.forEach((url, i) => {
    const chip = document.createElement("span");
    chip.className = "attachment";
    const img = document.createElement("img");
    img.src = url;
    img.alt = "picture to send";
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.title = "remove this picture";
    remove.onclick = () => { state.pendingImages.splice(i, 1); renderComposer(); };
    chip.append(img, remove);
    box.append(chip);
  });
}

function renderAll() {
  renderChatList();
  renderMessages();
  renderComposer();
}

let repaintQueued = false;
function repaintStreaming() {
  if (repaintQueued) return;
  repaintQueued = true;
  requestAnimationFrame(() => {
    repaintQueued = false;
    const s = state.streaming;
    const message = s?.message || state.lastFinished;
    const el = message && messageElements.get(message);
    if (!el) return;
    const box = $("messages");
    const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    fillMessage(el, message);
    if (nearBottom) box.scrollTop = box.scrollHeight;
  });
}

// ---- sending and streaming ----

function apiMessages(chat) {
  // A turn the server refused (a 4xx/5xx before any answer: a broken picture, a too-long prompt) stays on screen
  // but is not sent again, or every later message would be refused the same way.
  return chat.messages.filter(m => !m.pending && !m.rejected).map(m => {
    if (m.role === "user") {
      if (!m.images?.length) return { role: "user", content: m.content };
      return { role: "user", content: [{ type: "text", text: m.content },
        ...m.images.map(url => ({ type: "image_url", image_url: { url } }))] };
    }
    const out = { role: "assistant", content: m.content || "" };
    if (m.reasoning) out.reasoning_content = m.reasoning;
    return out;
  });
}

function requestBody(chat) {
  const body = { model: state.health?.model || "strata", messages: apiMessages(chat), stream: true,
                 stream_options: { include_usage: true } };
  if (state.settings.thinking) body.reasoning_effort = state.settings.thinking;
  for (const field of SAMPLING_FIELDS) {
    const value = state.settings.sampling[field];
    if (value !== undefined && value !== null && value !== "") body[field] = Number(value);
  }
  return body;
}

async function send() {
  if (state.streaming) return;
  const text = $("prompt").value.trim();
  if (!text && !state.pendingImages.length) return;
  const chat = currentChat() || newChat();
  const question = { role: "user", content: text, images: state.pendingImages };
  chat.messages.push(question);
  if (chat.title === "New chat") chat.title = (text || "Picture").slice(0, 48);
  state.pendingImages = [];
  $("prompt").value = "";
  autosize();
  const message = { role: "assistant", content: "", reasoning: "", pending: true, thinkingOpen: false };
  chat.messages.push(message);
  const body = requestBody(chat);
  state.streaming = { controller: new AbortController(), chat, message };
  saveChats();
  renderAll();
  try {
    await streamAnswer(body, message, state.streaming.controller.signal);
  } catch (e) {
    if (e.name === "AbortError") message.stopped = true;
    else message.error = `Error: ${e.message}`;
    if (e.rejected) {
      question.rejected = message.rejected = true;
      message.error += " (not sent: this message is left out of the conversation)";
    }
  } finally {
    message.pending = false;
    message.thinkingOpen = false;
    state.lastFinished = message;
    state.streaming = null;
    saveChats();
    renderChatList();
    renderComposer();
    repaintStreaming();
    $("prompt").focus();
  }
}

async function streamAnswer(body, message, signal) {
  const response = await fetch("/v1/chat/completions", {
    method: "POST", signal,
    headers: { "Content-Type": "application/json", ...authHeaders() },
    body: JSON.stringify(body),
  });
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    try { detail = (await response.json()).error?.message || detail; } catch (e) { /* not JSON */ }
    if (response.status === 401) detail += " (set the API key in Settings)";
    const refused = new Error(detail);
    refused.rejected = true;
    throw refused;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, cut).replace(/\r$/, "");
      buffer = buffer.slice(cut + 1);
      if (line.startsWith("data:")) handleEvent(line.slice(5).trim(), message);
    }
  }
}

function handleEvent(data, message) {
  if (!data || data === "[DONE]") return;
  let event;
  try { event = JSON.parse(data); } catch (e) { return; }
  if (event.error) {
    message.error = `Error: ${event.error.message || JSON.stringify(event.error)}`;
    repaintStreaming();
    return;
  }
  const choice = event.choices?.[0];
  const delta = choice?.delta || {};
  if (delta.reasoning_content) {
    message.reasoning += delta.reasoning_content;
    if (!message.content) message.thinkingOpen = true;
  }
  if (delta.content) {
    message.content += delta.content;
    message.thinkingOpen = false;   // fold the thinking once the answer starts
  }
  for (const call of delta.tool_calls || []) {
    message.toolCalls = message.toolCalls || [];
    const slot = message.toolCalls[call.index ?? 0] ||= { name: "", arguments: "" };
    if (call.function?.name) slot.name = call.function.name;
    if (call.function?.arguments) slot.arguments += call.function.arguments;
  }
  if (choice?.finish_reason) message.stats = { ...(message.stats || {}), finish_reason: choice.finish_reason };
  if (event.usage) {
    message.stats = { ...(message.stats || {}), prompt_tokens: event.usage.prompt_tokens,
      completion_tokens: event.usage.completion_tokens,
      cached_tokens: event.usage.prompt_tokens_details?.cached_tokens,
      // The usage-only chunk that ends the stream carries no timings: keep those of the finish chunk.
      predicted_per_second: event.timings?.predicted_per_second ?? message.stats?.predicted_per_second };
  }
  repaintStreaming();
}

function stop() {
  state.streaming?.controller.abort();
}

// ---- pictures ----

function addPictures(files) {
  for (const file of files) {
    if (!file.type.startsWith("image/")) continue;
    const reader = new FileReader();
    reader.onload = () => { state.pendingImages.push(reader.result); renderComposer(); };
    reader.readAsDataURL(file);
  }
}

// ---- settings ----

function loadSettingsForm() {
  $("thinking-level").value = state.settings.thinking || "";
  for (const field of SAMPLING_FIELDS) $(`s-${field}`).value = state.settings.sampling[field] ?? "";
  $("s-api-key").value = state.settings.apiKey || "";
}

function readSettingsForm() {
  state.settings.sampling = {};
  for (const field of SAMPLING_FIELDS) {
    const value = $(`s-${field}`).value.trim();
    if (value !== "") state.settings.sampling[field] = value;
  }
  state.settings.apiKey = $("s-api-key").value.trim();
  saveSettings();
}

// ---- server health ----

async function checkHealth() {
  try {
    const response = await fetch("/health");
    state.health = await response.json();
    $("model-name").textContent = state.health.model || "Strata";
    document.title = `Strata - ${state.health.model || "chat"}`;
    if (state.health.api_key_required && !state.settings.apiKey) {
      showBanner("This server needs an API key: enter it under Settings.");
    } else {
      showBanner("");
    }
  } catch (e) {
    $("model-name").textContent = "server not reachable";
    showBanner("Cannot reach the Strata server. Is it still running?");
  }
  renderComposer();
}

// ---- wiring ----

function autosize() {
  const box = $("prompt");
  box.style.height = "auto";
  box.style.height = `${Math.min(box.scrollHeight, 240)}px`;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
}

function wire() {
  $("new-chat").onclick = () => { if (!state.streaming) newChat(); };
  $("composer").onsubmit = (e) => { e.preventDefault(); send(); };
  $("stop").onclick = stop;
  $("prompt").addEventListener("input", autosize);
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $("attach").onclick = () => $("file-input").click();
  $("file-input").onchange = (e) => { addPictures(e.target.files); e.target.value = ""; };
  $("prompt").addEventListener("paste", (e) => {
    if (state.health?.images) addPictures([...e.clipboardData.files]);
  });
  $("thinking-level").onchange = (e) => { state.settings.thinking = e.target.value; saveSettings(); };
  $("toggle-settings").onclick = () => { loadSettingsForm(); $("settings").hidden = !$("settings").hidden; };
  $("settings").onsubmit = (e) => {
    e.preventDefault();
    readSettingsForm();
    $("settings").hidden = true;
    checkHealth();
  };
  $("settings-greedy").onclick = () => {
    for (const field of SAMPLING_FIELDS) $(`s-${field}`).value = "";
    readSettingsForm();
  };
  $("messages").addEventListener("click", (e) => {
    const button = e.target.closest(".copy-code");
    if (!button) return;
    copyText(button.closest(".code-block").querySelector("code").textContent);
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });
  $("show-monitor").onclick = () => window.StrataMonitor.show();
  $("back-to-chat").onclick = () => window.StrataMonitor.hide();
}

wire();
loadSettingsForm();
for (const chat of state.chats) {         // an answer cut off by closing the page is no longer pending
  for (const m of chat.messages) { if (m.pending) { m.pending = false; m.stopped = true; } m.thinkingOpen = false; }
}
state.currentId = state.chats[0]?.id ?? null;
renderAll();
checkHealth();
window.StrataMonitor.startStatusPolling();
