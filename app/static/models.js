// The models panel: every served model (`/v1/models`, sizes from `/api/tags`, what is loaded and until
// when from `/api/ps`), load and unload (`/api/generate` with nothing to answer, as Ollama's clients
// do), pull from Hugging Face (`/api/pull`'s progress stream, the same pull as `fireside pull`) and
// delete what a pull downloaded (`/api/delete`).
"use strict";

import { $, call, errorText, formatBytes, records } from "./api.js";

let changed = () => {};

async function json(path, options) {
  const response = await call(path, options);
  if (!response.ok) throw new Error(await errorText(response));
  return response.json();
}

function until(expiresAt) {
  if (!expiresAt) return "no";
  if (expiresAt.startsWith("9999")) return "yes, until unloaded";
  return `yes, until ${new Date(expiresAt).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}`;
}

function button(text, label, action) {
  const element = document.createElement("button");
  element.type = "button";
  element.textContent = text;
  element.setAttribute("aria-label", label);
  element.addEventListener("click", async () => {
    element.disabled = true;
    try {
      await action(element);
    } catch (error) {
      $("pull-status").textContent = error.message;
    } finally {
      element.disabled = false;
    }
  });
  return element;
}

function cell(row, text) {
  const element = row.insertCell();
  element.textContent = text;
  return element;
}

async function load(id) {
  const keepAlive = $("keep-alive").value;  // a Go duration or seconds, as Ollama takes it
  await json("/api/generate", { method: "POST", body: { model: id, ...(keepAlive ? { keep_alive: keepAlive } : {}) } });
  await refreshModels();
}

async function unload(id) {
  await json("/api/generate", { method: "POST", body: { model: id, keep_alive: 0 } });
  await refreshModels();
}

async function remove(id, element) {
  if (element.dataset.confirm !== "yes") {  // a second click deletes
    element.dataset.confirm = "yes";
    element.textContent = "Really delete";
    return;
  }
  const response = await call("/api/delete", { method: "DELETE", body: { model: id } });
  if (!response.ok) throw new Error(await errorText(response));
  $("pull-status").textContent = `Deleted ${id}.`;
  await refreshModels();
}

export async function refreshModels() {
  const [cards, tags, running] = await Promise.all([
    json("/v1/models"), json("/api/tags"), json("/api/ps")]);
  const sizes = new Map(tags.models.map((model) => [model.name, model.size]));
  const loaded = new Map(running.models.map((model) => [model.name, model]));
  const rows = cards.data.map((card) => {
    const row = document.createElement("tr");
    row.dataset.model = card.id;
    const name = row.insertCell();
    name.textContent = card.id;
    if (card.upstream) name.title = `runs on ${card.upstream}`;
    cell(row, formatBytes(sizes.get(card.id)));
    const ps = loaded.get(card.id);
    cell(row, String(ps?.context_length ?? card.context_length ?? "–"));
    cell(row, (card.capabilities ?? ["(known once loaded)"]).join(", "));
    cell(row, card.upstream ? "upstream" : until(ps?.expires_at)).className = "loaded";
    const actions = row.insertCell();
    if (!card.upstream) {
      actions.append(ps ? button("Unload", `Unload ${card.id}`, () => unload(card.id))
                        : button("Load", `Load ${card.id}`, () => load(card.id)),
                     button("Delete", `Delete ${card.id}`, (element) => remove(card.id, element)));
    }
    return row;
  });
  $("model-rows").replaceChildren(...rows);
  changed(cards.data);
}

async function pull(event) {
  event.preventDefault();
  const name = $("pull-name").value.trim();
  if (!name) return;
  const progress = $("pull-progress");
  $("pull").disabled = true;
  progress.hidden = false;
  progress.removeAttribute("value");  // indeterminate until a file's size is known
  try {
    const response = await call("/api/pull", { method: "POST", body: { model: name, stream: true } });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const part of records(response, { sse: false })) {
      if (part.error) throw new Error(part.error);
      if (part.total) {
        progress.max = part.total;
        progress.value = part.completed ?? 0;
        $("pull-status").textContent = `${part.status}: ${formatBytes(part.completed)} of ${formatBytes(part.total)}`;
      } else {
        $("pull-status").textContent = part.status;
      }
    }
    $("pull-name").value = "";
    await refreshModels();
  } catch (error) {
    $("pull-status").textContent = `Pull failed: ${error.message}`;
    progress.hidden = true;
  } finally {
    $("pull").disabled = false;
  }
}

export function initModels(onChange) {
  changed = onChange;
  $("open-models").addEventListener("click", () => {
    $("models-panel").showModal();
    refreshModels().catch((error) => { $("pull-status").textContent = error.message; });
  });
  $("close-models").addEventListener("click", () => $("models-panel").close());
  $("pull-form").addEventListener("submit", pull);
}
