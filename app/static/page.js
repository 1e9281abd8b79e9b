// Fireside's page: chats with served models through the server's own /v1 API (same origin, nothing
// fetched from elsewhere), kept in this browser (store.js), answers rendered as sanitized Markdown
// (render.js), the models panel in models.js.
"use strict";

import { $, call, errorText, hasKey, records, setKey } from "./api.js";
import { initModels } from "./models.js";
import { copyText, renderMarkdown, streamingRenderer } from "./render.js";
import * as store from "./store.js";

const THEME_STORE = "fireside.theme";
const SETTINGS = { system: "system", temperature: "temperature", top_p: "top-p", max_tokens: "max-tokens",
                   reasoning_effort: "reasoning-effort", schema: "schema", trim: "trim" };
let conversation = null;  // the one shown; saved once it has a message
let running = null;  // the AbortController of the answer being streamed
let pending = [];  // images attached to the next message, as data URIs
let cards = new Map();  // model id -> its /v1/models card
const shown = new Map();  // model id -> its /api/show capabilities

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

// ---- models ----------------------------------------------------------------------------------

function modelsChanged(list) {
  cards = new Map(list.map((card) => [card.id, card]));
  const chatting = list.filter((card) => !card.capabilities || card.capabilities.includes("chat"));
  const select = $("model");
  const wanted = conversation?.model || select.value;
  select.replaceChildren(...chatting.map((card) => new Option(card.id, card.id)));
  if (chatting.some((card) => card.id === wanted)) select.value = wanted;
  setStatus(chatting.length ? "" : "No model here can chat.", !chatting.length);
  modelSelected();
}

async function loadModels() {
  const response = await call("/v1/models");
  if (response.status === 401) {
    $("key-form").hidden = false;
    setStatus(hasKey() ? "That key was refused." : "An API key is needed.", true);
    return;
  }
  if (!response.ok) { setStatus(await errorText(response), true); return; }
  $("key-form").hidden = true;
  modelsChanged((await response.json()).data);
}

// What the chosen model does: its card's capabilities, else (not loaded yet) `/api/show`'s words.
async function capabilities(id) {
  const card = cards.get(id);
  if (card?.capabilities) {
    return new Set([...card.capabilities, ...(shown.get(id) ?? [])]);
  }
  if (!shown.has(id)) {
    const response = await call("/api/show", { method: "POST", body: { model: id } });
    shown.set(id, response.ok ? (await response.json()).capabilities ?? [] : []);
  }
  return new Set(shown.get(id));
}

async function modelSelected() {
  const id = $("model").value;
  if (!id) return;
  if (conversation && conversation.model !== id) { conversation.model = id; persist(); }
  const card = cards.get(id);
  if (!card?.upstream && !(shown.has(id) && card?.loaded)) {  // thinking: Ollama's words, once loaded
    const response = await call("/api/show", { method: "POST", body: { model: id } });
    shown.set(id, response.ok ? (await response.json()).capabilities ?? [] : []);
  }
  const can = await capabilities(id);
  $("effort-field").hidden = !can.has("thinking");
  $("attach").title = can.has("vision") ? "Attach images or text files" : "Attach text files";
  showContext();
}

// ---- conversations ---------------------------------------------------------------------------

function settingsFromForm() {
  const settings = {};
  for (const [name, id] of Object.entries(SETTINGS)) {
    settings[name] = $(id).type === "checkbox" ? $(id).checked : $(id).value;
  }
  return settings;
}

function settingsToForm(settings) {
  for (const [name, id] of Object.entries(SETTINGS)) {
    if (settings?.[name] === undefined) continue;
    if ($(id).type === "checkbox") $(id).checked = settings[name]; else $(id).value = settings[name];
  }
}

function fresh() {
  return { id: store.newId(), title: "", created: Date.now(), updated: Date.now(), model: $("model").value,
           settings: settingsFromForm(), messages: [] };
}

async function persist() {
  if (!conversation?.messages.length) return;
  conversation.settings = settingsFromForm();
  await store.saveConversation(conversation);
  await listConversations();
}

async function listConversations() {
  if (document.activeElement?.classList.contains("rename-field")) return;  // redrawn when the rename ends
  const search = $("search").value.trim().toLowerCase();
  const all = await store.listConversations();
  const items = all.filter((c) => !search || c.title.toLowerCase().includes(search)).map((c) => {
    const item = document.createElement("li");
    item.dataset.id = c.id;
    if (c.id === conversation?.id) item.setAttribute("aria-current", "true");
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open-chat";
    open.textContent = c.title || "Untitled";
    open.addEventListener("click", () => openConversation(c.id));
    const rename = document.createElement("button");
    rename.type = "button";
    rename.className = "rename-chat";
    rename.textContent = "Rename";
    rename.setAttribute("aria-label", `Rename ${c.title}`);
    rename.addEventListener("click", () => renameInPlace(item, c));
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "delete-chat";
    remove.textContent = "Delete";
    remove.setAttribute("aria-label", `Delete ${c.title}`);
    remove.addEventListener("click", async () => {
      await store.deleteConversation(c.id);
      if (conversation?.id === c.id) startConversation();
      await listConversations();
    });
    item.append(open, rename, remove);
    return item;
  });
  $("conversation-list").replaceChildren(...items);
}

function renameInPlace(item, record) {
  const field = document.createElement("input");
  field.value = record.title;
  field.className = "rename-field";
  field.setAttribute("aria-label", "New title");
  let ended = false;
  const done = async (keep) => {
    if (ended) return;
    ended = true;
    field.blur();
    if (keep && field.value.trim()) {
      record.title = field.value.trim();
      if (conversation?.id === record.id) conversation.title = record.title;
      await store.saveConversation(record);
    }
    await listConversations();
  };
  field.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); done(true); }
    if (event.key === "Escape") done(false);
  });
  field.addEventListener("blur", () => done(true), { once: true });
  item.replaceChildren(field);
  field.focus();
  field.select();
}

async function openConversation(id) {
  if (running) running.abort();
  conversation = await store.getConversation(id);
  settingsToForm(conversation.settings);
  if (cards.has(conversation.model)) $("model").value = conversation.model;
  drawConversation();
  await listConversations();
  modelSelected();
  document.body.classList.remove("show-chats");
}

function startConversation() {
  if (running) running.abort();
  conversation = fresh();
  pending = [];
  drawAttachments();
  drawConversation();
  listConversations();
  $("prompt").focus();
}

function download(name, data) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: "application/json" }));
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

async function importFile() {
  const [file] = $("import-file").files;
  if (!file) return;
  try {
    const count = await store.importConversations(JSON.parse(await file.text()));
    setStatus(`Imported ${count} conversation${count === 1 ? "" : "s"}.`);
  } catch (error) {
    setStatus(`Import failed: ${error.message}`, true);
  }
  $("import-file").value = "";
  await listConversations();
}

// ---- drawing the conversation ------------------------------------------------------------------

function actionButton(text, className, label, action) {
  const element = document.createElement("button");
  element.type = "button";
  element.className = className;
  element.textContent = text;
  element.setAttribute("aria-label", label);
  element.addEventListener("click", action);
  return element;
}

function reasoningBlock(turn, open) {
  let block = turn.querySelector(".reasoning");
  if (!block) {
    block = document.createElement("details");
    block.className = "reasoning";
    block.open = open;
    const summary = document.createElement("summary");
    summary.textContent = "Reasoning";
    const text = document.createElement("div");
    text.className = "reasoning-text";
    block.append(summary, text);
    turn.querySelector(".content").before(block);
  }
  return block.querySelector(".reasoning-text");
}

function drawContent(element, message) {
  if (message.role === "user") { element.textContent = message.content; return; }
  renderMarkdown(element, message.format === "json" ? `\`\`\`json\n${message.content}\n\`\`\`` : message.content);
}

function drawTurn(message, index) {
  const turn = document.createElement("article");
  turn.className = `turn ${message.role}`;
  turn.dataset.index = index;
  turn.setAttribute("aria-label", message.role === "user" ? "You" : "Answer");
  const content = document.createElement("div");
  content.className = "content";
  turn.append(content);
  if (message.images?.length) {
    const images = document.createElement("div");
    images.className = "thumbnails";
    for (const url of message.images) {
      const image = document.createElement("img");
      image.src = url;
      image.alt = "attached image";
      images.append(image);
    }
    turn.prepend(images);
  }
  if (message.reasoning) reasoningBlock(turn, false).textContent = message.reasoning;
  drawContent(content, message);
  if (message.error) showError(turn, message.error);
  if (message.stopped) {
    const note = document.createElement("p");
    note.className = "stopped";
    note.textContent = "Stopped before the end.";
    content.after(note);
  }
  const actions = document.createElement("div");
  actions.className = "actions";
  actions.append(actionButton("Copy", "copy", "Copy this message", () => copyText(message.content)));
  if (message.role === "user") {
    actions.append(actionButton("Edit", "edit", "Edit this message and send it again", () => editTurn(turn, index)));
  } else if (index === conversation.messages.length - 1) {
    actions.append(actionButton("Regenerate", "regenerate", "Answer again", regenerate));
  }
  turn.append(actions);
  return turn;
}

function drawConversation() {
  const turns = conversation.messages.map(drawTurn);
  $("chat").replaceChildren(...turns);
  $("chat").scrollTop = $("chat").scrollHeight;
  showContext();
}

function showError(turn, text) {
  const shown = document.createElement("p");
  shown.className = "error";
  shown.textContent = text;
  turn.querySelector(".content").after(shown);
  if (/context|too long|prompt_truncate_len|exceeds/i.test(text) && !$("trim").checked) {
    shown.append(" ", actionButton("Drop the oldest turns and retry", "trim-retry", "Drop the oldest turns and retry",
                                   () => { $("trim").checked = true; regenerate(); }));
  }
}

function editTurn(turn, index) {
  if (running) return;
  const message = conversation.messages[index];
  const field = document.createElement("textarea");
  field.className = "edit-field";
  field.value = message.content;
  field.rows = Math.min(12, message.content.split("\n").length + 1);
  field.setAttribute("aria-label", "Edited message");
  const save = actionButton("Send", "edit-send", "Send the edited message", () => {
    const text = field.value.trim();
    if (!text) return;
    conversation.messages = [...conversation.messages.slice(0, index), { ...message, content: text }];
    drawConversation();
    answer();
  });
  const cancel = actionButton("Cancel", "edit-cancel", "Keep the message as it was", drawConversation);
  field.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); save.click(); }
    if (event.key === "Escape") cancel.click();
  });
  turn.replaceChildren(field, save, cancel);
  field.focus();
}

// ---- context ------------------------------------------------------------------------------------

function contextLimit() {
  return cards.get($("model").value)?.context_length ?? null;
}

function contextUsed() {
  const last = [...(conversation?.messages ?? [])].reverse().find((m) => m.usage);
  return last ? last.usage.prompt_tokens + last.usage.completion_tokens : 0;
}

function showContext() {
  const used = contextUsed();
  const limit = contextLimit();
  const meter = $("context-meter");
  meter.max = limit || 1;
  meter.value = limit ? Math.min(used, limit) : 0;
  $("context-text").textContent = limit ? `${used} of ${limit} tokens (${Math.round(100 * used / limit)}%)`
                                        : `${used} tokens`;
  const room = limit ? limit - used - Number($("max-tokens").value || 0) : Infinity;
  const warning = $("context-warning");
  warning.hidden = room > 0;
  if (room <= 0) {
    const left = Math.max(0, limit - used);
    const images = conversation.messages.some((m) => m.images?.length);
    warning.textContent = `The next answer may not fit: ${left} tokens of the context are left, `
      + `and Max tokens asks for ${$("max-tokens").value}. `
      + ($("trim").checked && !images ? "The oldest turns are left out of what the model sees."
        : images ? "Start a new chat or lower Max tokens (turns with images cannot be dropped)."
        : "Tick \"Drop the oldest turns\" in the settings, start a new chat, or lower Max tokens.");
  }
}

// ---- attachments --------------------------------------------------------------------------------

function readAs(file, how) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    if (how === "url") reader.readAsDataURL(file); else reader.readAsText(file);
  });
}

async function attach(files) {
  const can = await capabilities($("model").value);
  for (const file of files) {
    if (file.type.startsWith("image/")) {
      if (!can.has("vision") && cards.get($("model").value)?.capabilities) {
        setStatus(`${$("model").value} does not read images: ${file.name} was not attached.`, true);
        continue;
      }
      pending.push(await readAs(file, "url"));
    } else {
      const text = await readAs(file, "text");
      const fence = text.includes("```") ? "~~~~" : "```";
      const prompt = $("prompt");
      prompt.value = `${prompt.value}${prompt.value ? "\n\n" : ""}${file.name}:\n${fence}\n${text.replace(/\n$/, "")}\n${fence}\n`;
    }
  }
  drawAttachments();
}

function drawAttachments() {
  $("attachments").replaceChildren(...pending.map((url, index) => {
    const item = document.createElement("span");
    item.className = "attachment";
    const image = document.createElement("img");
    image.src = url;
    image.alt = `image ${index + 1} to send`;
    item.append(image, actionButton("×", "remove-attachment", `Remove image ${index + 1}`, () => {
      pending.splice(index, 1);
      drawAttachments();
    }));
    return item;
  }));
}

// ---- asking ---------------------------------------------------------------------------------------

function apiMessage(message) {
  if (message.role !== "user" || !message.images?.length) return { role: message.role, content: message.content };
  return { role: "user", content: [{ type: "text", text: message.content },
                                   ...message.images.map((url) => ({ type: "image_url", image_url: { url } }))] };
}

function requestBody() {
  const settings = settingsFromForm();
  const messages = conversation.messages.filter((m) => !m.error || m.content).map(apiMessage);
  if (settings.system.trim()) messages.unshift({ role: "system", content: settings.system.trim() });
  const body = { model: $("model").value, messages, stream: true, stream_options: { include_usage: true },
                 temperature: Number(settings.temperature), top_p: Number(settings.top_p),
                 max_tokens: Number(settings.max_tokens) };
  if (settings.reasoning_effort && !$("effort-field").hidden) body.reasoning_effort = settings.reasoning_effort;
  const limit = contextLimit();
  const hasImages = conversation.messages.some((m) => m.images?.length);
  if (settings.trim && limit && !hasImages) body.prompt_truncate_len = Math.max(1, limit - body.max_tokens);
  const format = responseFormat();
  if (format === null) return null;
  if (format) body.response_format = format;
  return body;
}

// The answer's `response_format` for the schema in the settings: undefined without one, null (and
// the reason shown) for one that is not JSON.
function responseFormat() {
  const schema = $("schema").value.trim();
  $("schema-error").hidden = true;
  if (!schema) return undefined;
  try {
    return { type: "json_schema", json_schema: { name: "answer", schema: JSON.parse(schema) } };
  } catch (error) {
    $("schema-error").textContent = `The schema is not JSON: ${error.message}`;
    $("schema-error").hidden = false;
    return null;
  }
}

function showStats(usage, started, firstToken, ended) {
  const decodeSeconds = (ended - (firstToken ?? ended)) / 1000;
  const perSecond = usage.completion_tokens > 1 && decodeSeconds > 0
    ? (usage.completion_tokens - 1) / decodeSeconds : null;
  $("tps").textContent = perSecond === null ? "–" : perSecond.toFixed(1);
  $("ttft").textContent = firstToken ? `${((firstToken - started) / 1000).toFixed(2)} s` : "–";
  $("prompt-tokens").textContent = usage.prompt_tokens;
  $("cached-tokens").textContent = usage.prompt_tokens_details?.cached_tokens ?? 0;
  $("completion-tokens").textContent = usage.completion_tokens;
}

function busy(on) {
  $("chat").setAttribute("aria-busy", String(on));  // a screen reader reads the answer once it is whole
  $("send").disabled = on;
  $("stop").disabled = !on;
  for (const element of $("chat").querySelectorAll(".edit, .regenerate")) element.disabled = on;
}

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if ((!text && !pending.length) || running || !$("model").value) return;
  if (responseFormat() === null) return;
  conversation ??= fresh();
  conversation.model = $("model").value;
  conversation.messages.push({ role: "user", content: text, ...(pending.length ? { images: pending } : {}) });
  conversation.title ||= (text || "Image").replace(/\s+/g, " ").slice(0, 60);
  $("prompt").value = "";
  pending = [];
  drawAttachments();
  drawConversation();
  await answer();
}

function regenerate() {
  if (running) return;
  const messages = conversation.messages;
  while (messages.length && messages[messages.length - 1].role === "assistant") messages.pop();
  drawConversation();
  answer();
}

// The chat keeps the streaming answer in view unless the reader scrolled up to read something else.
let following = true;

function followAnswer() {
  if (following) $("chat").scrollTop = $("chat").scrollHeight;
}

function noteScroll() {
  const chat = $("chat");
  following = chat.scrollHeight - chat.scrollTop - chat.clientHeight < 48;
}

// Streams the model's answer to the conversation as it stands, into a new assistant turn.
async function answer() {
  const body = requestBody();
  if (!body) return;
  const message = { role: "assistant", content: "", ...(body.response_format ? { format: "json" } : {}) };
  conversation.messages.push(message);
  await persist();
  const turn = drawTurn(message, conversation.messages.length - 1);
  turn.querySelector(".actions").remove();  // drawn again once the answer is complete
  $("chat").append(turn);
  const content = turn.querySelector(".content");
  const renderer = streamingRenderer(content);
  const shown = () => (message.format === "json" ? `\`\`\`json\n${message.content}\n\`\`\`` : message.content);
  const controller = new AbortController();
  running = controller;
  following = true;
  busy(true);
  const started = performance.now();
  let firstToken = null;
  try {
    const response = await call("/v1/chat/completions", { method: "POST", body, signal: controller.signal });
    if (response.status === 401) {  // the key was refused: the page asks for one, the question stays
      conversation.messages.pop();
      turn.remove();
      running = null;
      busy(false);
      await persist();
      await loadModels();
      return;
    }
    if (!response.ok) throw new Error(await errorText(response));
    for await (const chunk of records(response)) {
      if (chunk.error) throw new Error(chunk.error.message);
      const delta = chunk.choices?.[0]?.delta;
      if (delta?.content || delta?.reasoning_content) firstToken ??= performance.now();
      if (delta?.reasoning_content) {
        message.reasoning = (message.reasoning ?? "") + delta.reasoning_content;
        reasoningBlock(turn, true).textContent = message.reasoning;
      }
      if (delta?.content) { message.content += delta.content; renderer.update(shown()); }
      if (chunk.usage) {
        message.usage = chunk.usage;
        showStats(chunk.usage, started, firstToken, performance.now());
      }
      followAnswer();
    }
  } catch (error) {
    if (error.name === "AbortError") message.stopped = true; else message.error = error.message;
  }
  renderer.flush();
  try {
    if (conversation.messages.includes(message)) {
      await persist();
      drawConversation();
    }
  } finally {
    if (running === controller) {
      running = null;
      busy(false);
    }
  }
  loadModels().catch(() => {});  // the model may have loaded: its context and capabilities are known now
}

// ---- the page -------------------------------------------------------------------------------------

function applyTheme() {
  const theme = localStorage.getItem(THEME_STORE) || "system";
  $("theme").value = theme;
  if (theme === "system") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

function toggle(name, button) {
  const on = document.body.classList.toggle(name);
  $(button).setAttribute("aria-expanded", String(on));
}

function init() {
  applyTheme();
  $("theme").addEventListener("change", () => { localStorage.setItem(THEME_STORE, $("theme").value); applyTheme(); });
  $("ask").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) send(event);
  });
  $("prompt").addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files ?? [])];
    if (files.length) { event.preventDefault(); attach(files); }
  });
  $("stop").addEventListener("click", () => running?.abort());
  $("chat").addEventListener("scroll", noteScroll, { passive: true });
  $("ask").addEventListener("dragover", (event) => event.preventDefault());
  $("ask").addEventListener("drop", (event) => {
    event.preventDefault();
    attach([...(event.dataTransfer?.files ?? [])]);
  });
  $("new-chat").addEventListener("click", startConversation);
  $("search").addEventListener("input", listConversations);
  $("export").addEventListener("click", async () => download("fireside-chats.json", await store.listConversations()));
  $("import").addEventListener("click", () => $("import-file").click());
  $("import-file").addEventListener("change", importFile);
  $("attach").addEventListener("click", () => $("attach-input").click());
  $("attach-input").addEventListener("change", async () => {
    await attach([...$("attach-input").files]);
    $("attach-input").value = "";
  });
  $("model").addEventListener("change", modelSelected);
  for (const id of Object.values(SETTINGS)) $(id).addEventListener("change", () => { persist(); showContext(); });
  $("toggle-chats").addEventListener("click", () => toggle("show-chats", "toggle-chats"));
  $("toggle-settings").addEventListener("click", () => toggle("show-settings", "toggle-settings"));
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setKey($("key").value.trim());
    $("key").value = "";
    loadModels().then(listConversations);
  });
  initModels(modelsChanged);
  conversation = fresh();
  loadModels().catch((error) => setStatus(error.message, true));
  listConversations().catch((error) => setStatus(`Conversations cannot be kept here: ${error.message}`, true));
}

init();
