// Model output as Markdown: parsed by the vendored `marked`, then cleaned by the vendored DOMPurify
// before it reaches the DOM, since a model's answer is untrusted text (raw HTML in it never runs).
// Code blocks get a language label and a copy button. Rendering while an answer streams re-parses
// the text at most once per animation frame.
"use strict";

const ALLOWED = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "img"],
  FORBID_ATTR: ["style"],
};

window.marked.setOptions({ gfm: true, breaks: false });

// Links open elsewhere, without telling the page they came from where they went.
window.DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

function decorateCode(container) {
  for (const pre of container.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    if (!code || pre.parentElement?.classList.contains("code-block")) continue;
    const language = [...code.classList].find((name) => name.startsWith("language-"))?.slice(9) || "text";
    const block = document.createElement("div");
    block.className = "code-block";
    const bar = document.createElement("div");
    bar.className = "code-bar";
    const label = document.createElement("span");
    label.className = "code-language";
    label.textContent = language;
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy-code";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", `Copy the ${language} code`);
    copy.addEventListener("click", async () => {
      await copyText(code.textContent);
      copy.textContent = "Copied";
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    });
    bar.append(label, copy);
    pre.replaceWith(block);
    block.append(bar, pre);
  }
}

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {  // no clipboard permission (an http origin other than localhost): the old way
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
}

// `text` as Markdown, sanitized, into `container`.
export function renderMarkdown(container, text) {
  const html = window.marked.parse(text);
  const clean = window.DOMPurify.sanitize(html, { ...ALLOWED, RETURN_DOM_FRAGMENT: true });
  container.replaceChildren(clean);
  decorateCode(container);
}

// A renderer for a streaming answer: `update(text)` as often as text arrives, `flush()` at the end.
export function streamingRenderer(container) {
  let pending = null;
  let frame = 0;
  const draw = () => { frame = 0; renderMarkdown(container, pending); };
  return {
    update(text) {
      pending = text;
      if (!frame) frame = requestAnimationFrame(draw);
    },
    flush() {
      if (frame) cancelAnimationFrame(frame);
      frame = 0;
      if (pending !== null) renderMarkdown(container, pending);
    },
  };
}
