// Fireside's page: chat with a served model through the server's own /v1 API (same origin,
// nothing fetched from elsewhere). The API key, when the server wants one, stays in this tab.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "fireside.apiKey";
let history = [];
let running = null;  // the AbortController of the answer being streamed

function headers() {
  const result = { "Content-Type": "application/json" };
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

async function errorText(response) {
  try {
    const body = await response.json();
    return body.error?.message || body.error || JSON.stringify(body);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

async function loadModels() {
  const response = await fetch("/v1/models", { headers: headers() });
  if (response.status === 401) {
    $("key-form").hidden = false;
    setStatus(sessionStorage.getItem(KEY_STORE) ? "That key was refused." : "An API key is needed.", true);
    return;
  }
  if (!response.ok) { setStatus(await errorText(response), true); return; }
  $("key-form").hidden = true;
  const chatting = (await response.json()).data.filter(
    (model) => !model.capabilities || model.capabilities.includes("chat"));
  const select = $("model");
  select.replaceChildren(...chatting.map((model) => new Option(model.id, model.id)));
  setStatus(chatting.length ? "" : "No model here can chat.", !chatting.length);
}

function addTurn(role, text = "") {
  const turn = document.createElement("div");
  turn.className = `turn ${role}`;
  const answer = document.createElement("div");
  answer.className = "content";
  answer.textContent = text;
  turn.append(answer);
  $("chat").append(turn);
  return turn;
}

function reasoningBlock(turn) {
  let block = turn.querySelector(".reasoning");
  if (!block) {
    block = document.createElement("details");
    block.className = "reasoning";
    block.open = true;
    const summary = document.createElement("summary");
    summary.textContent = "Reasoning";
    const text = document.createElement("div");
    text.className = "reasoning-text";
    block.append(summary, text);
    turn.prepend(block);
  }
  return block.querySelector(".reasoning-text");
}

function requestBody(messages) {
  const body = {
    model: $("model").value, messages, stream: true, stream_options: { include_usage: true },
    temperature: Number($("temperature").value), max_tokens: Number($("max-tokens").value),
  };
  const schema = $("schema").value.trim();
  $("schema-error").hidden = true;
  if (schema) {
    try {
      body.response_format = { type: "json_schema", json_schema: { name: "answer", schema: JSON.parse(schema) } };
    } catch (error) {
      $("schema-error").textContent = `The schema is not JSON: ${error.message}`;
      $("schema-error").hidden = false;
      return null;
    }
  }
  return body;
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

// The chunks of an OpenAI event stream, as they arrive.
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || running || !$("model").value) return;
  const system = $("system").value.trim();
  const messages = [...(system ? [{ role: "system", content: system }] : []), ...history,
                    { role: "user", content: text }];
  const body = requestBody(messages);
  if (!body) return;
  addTurn("user", text);
  $("prompt").value = "";
  const turn = addTurn("assistant");
  const content = turn.querySelector(".content");
  running = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  const started = performance.now();
  let firstToken = null;
  let answer = "";
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: running.signal,
    });
    if (response.status === 401) { turn.remove(); await loadModels(); return; }
    if (!response.ok) throw new Error(await errorText(response));
    for await (const chunk of events(response)) {
      if (chunk.error) throw new Error(chunk.error.message);
      const delta = chunk.choices?.[0]?.delta;
      if (delta?.content || delta?.reasoning_content) firstToken ??= performance.now();
      if (delta?.reasoning_content) reasoningBlock(turn).textContent += delta.reasoning_content;
      if (delta?.content) { answer += delta.content; content.textContent = answer; }
      if (chunk.usage) showStats(chunk.usage, started, firstToken, performance.now());
      $("chat").scrollTop = $("chat").scrollHeight;
    }
    const reasoning = turn.querySelector(".reasoning");
    if (reasoning) reasoning.open = false;
    history = [...messages.filter((m) => m.role !== "system"), { role: "assistant", content: answer }];
  } catch (error) {
    if (error.name !== "AbortError") {
      const shown = document.createElement("p");
      shown.className = "error";
      shown.textContent = error.message;
      turn.append(shown);
    }
  } finally {
    running = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

function init() {
  $("ask").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  $("stop").addEventListener("click", () => running?.abort());
  $("clear").addEventListener("click", () => { history = []; $("chat").replaceChildren(); });
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_STORE, $("key").value.trim());
    $("key").value = "";
    loadModels();
  });
  loadModels().catch((error) => setStatus(error.message, true));
}

init();
