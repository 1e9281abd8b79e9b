// Conversations kept in this browser (IndexedDB), one record each:
// { id, title, created, updated, model, settings, messages: [{ role, content, images?, reasoning?, usage? }] }
"use strict";

const DATABASE = "fireside";
const STORE = "conversations";
let opened = null;

function database() {
  opened ??= new Promise((resolve, reject) => {
    const request = indexedDB.open(DATABASE, 1);
    request.onupgradeneeded = () => {
      request.result.createObjectStore(STORE, { keyPath: "id" }).createIndex("updated", "updated");
    };
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
  return opened;
}

async function run(mode, work) {
  const db = await database();
  return new Promise((resolve, reject) => {
    const transaction = db.transaction(STORE, mode);
    const request = work(transaction.objectStore(STORE));
    transaction.oncomplete = () => resolve(request?.result);
    transaction.onerror = () => reject(transaction.error);
  });
}

export const newId = () => crypto.randomUUID?.() ?? `${Date.now()}-${Math.random().toString(16).slice(2)}`;

// Every conversation, the latest changed first.
export async function listConversations() {
  const all = await run("readonly", (store) => store.getAll());
  return all.sort((a, b) => b.updated - a.updated);
}

export const getConversation = (id) => run("readonly", (store) => store.get(id));

export function saveConversation(conversation) {
  conversation.updated = Date.now();
  return run("readwrite", (store) => store.put(structuredClone(conversation)));
}

export const deleteConversation = (id) => run("readwrite", (store) => store.delete(id));

// Conversations from an export (a list, or one); each gets a new id unless it is not here yet.
export async function importConversations(records) {
  const list = Array.isArray(records) ? records : [records];
  const known = new Set((await listConversations()).map((c) => c.id));
  let count = 0;
  for (const record of list) {
    if (!record || !Array.isArray(record.messages)) throw new Error("not a Fireside conversation export");
    const conversation = { ...record, id: known.has(record.id) || !record.id ? newId() : record.id,
                           title: String(record.title || "Imported chat"), created: record.created || Date.now() };
    await run("readwrite", (store) => store.put(conversation));
    count += 1;
  }
  return count;
}
