// The server's own HTTP API, as the page calls it: the key (when the server wants one) stays in this tab.
"use strict";

const KEY_STORE = "fireside.apiKey";

export const $ = (id) => document.getElementById(id);

export function headers() {
  const result = { "Content-Type": "application/json" };
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

export const hasKey = () => Boolean(sessionStorage.getItem(KEY_STORE));
export const setKey = (key) => sessionStorage.setItem(KEY_STORE, key);

export function call(path, { method = "GET", body, signal } = {}) {
  return fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body),
                       signal });
}

export async function errorText(response) {
  try {
    const body = await response.json();
    return body.error?.message || body.error || JSON.stringify(body);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

// The records of a stream as they arrive: `data:` events (an OpenAI stream) or lines (Ollama's NDJSON).
export async function* records(response, { sse = true } = {}) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const separator = sse ? "\n\n" : "\n";
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffered.indexOf(separator)) >= 0) {
      const record = buffered.slice(0, end);
      buffered = buffered.slice(end + separator.length);
      if (!sse) {
        if (record.trim()) yield JSON.parse(record);
        continue;
      }
      for (const line of record.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
  if (!sse && buffered.trim()) yield JSON.parse(buffered);
}

export function formatBytes(bytes) {
  if (!bytes) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  const step = Math.min(units.length - 1, Math.floor(Math.log(bytes) / Math.log(1024)));
  return `${(bytes / 1024 ** step).toFixed(step ? 1 : 0)} ${units[step]}`;
}
