// The little JavaScript Pitfalls has; every page also works without it.
(() => {
  "use strict";

  // "/" focuses the search box, as on most sites with one.
  document.addEventListener("keydown", (event) => {
    const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement.tagName);
    if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
      const box = document.getElementById("q");
      if (box) {
        event.preventDefault();
        box.focus();
        box.select();
      }
    }
  });

  // Ctrl/Cmd+Enter submits the paste box.
  const paste = document.querySelector("form.paste textarea");
  if (paste) {
    paste.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        paste.form.requestSubmit();
      }
    });
  }

  // A copy button on every code block.
  for (const pre of document.querySelectorAll("main pre")) {
    const wrapper = document.createElement("div");
    wrapper.className = "code-block";
    pre.parentNode.insertBefore(wrapper, pre);
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy this code");
    button.addEventListener("click", async () => {
      const code = pre.querySelector("code") || pre;
      try {
        await navigator.clipboard.writeText(code.textContent);
        button.textContent = "Copied";
      } catch {
        button.textContent = "Press Ctrl+C";
        const range = document.createRange();
        range.selectNodeContents(code);
        getSelection().removeAllRanges();
        getSelection().addRange(range);
      }
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    });
    wrapper.append(button, pre);
  }

  // Results as you type, from the JSON API, under the search box in the header.
  const box = document.getElementById("q");
  const list = document.getElementById("live-results");
  if (!box || !list) return;
  let timer = 0;
  let latest = 0;
  const hide = () => { list.hidden = true; list.replaceChildren(); };
  box.setAttribute("aria-controls", "live-results");
  box.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const text = box.value.trim();
      if (!text) { hide(); return; }
      const ticket = ++latest;
      const response = await fetch(`/api/v1/search?limit=8&q=${encodeURIComponent(text)}`);
      if (!response.ok || ticket !== latest) return;
      const data = await response.json();
      const items = data.hits.map((hit) => {
        const item = document.createElement("li");
        const link = document.createElement("a");
        link.href = hit.url;
        link.textContent = hit.title;
        const kind = document.createElement("span");
        kind.className = "kind";
        kind.textContent = hit.kind;
        item.append(link, " ", kind);
        return item;
      });
      const all = document.createElement("li");
      all.className = "all";
      const more = document.createElement("a");
      more.href = `/search?q=${encodeURIComponent(text)}`;
      more.textContent = data.total ? `All ${data.total} results` : "No results: paste the traceback instead";
      if (!data.total) more.href = "/match";
      all.append(more);
      list.replaceChildren(...items, all);
      list.hidden = false;
    }, 180);
  });
  box.addEventListener("keydown", (event) => { if (event.key === "Escape") hide(); });
  document.addEventListener("click", (event) => { if (!list.contains(event.target) && event.target !== box) hide(); });
})();
