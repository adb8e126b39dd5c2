// The little JavaScript Pitfalls has; every page also works without it.
(() => {
  "use strict";
  // The path the site is served under ("" or a proxy's sub-path such as "/kb").
  const ROOT = document.body.dataset.root || "";

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
      const response = await fetch(`${ROOT}/api/v1/search?limit=8&q=${encodeURIComponent(text)}`);
      if (!response.ok || ticket !== latest) return;
      const data = await response.json();
      const items = data.hits.map((hit) => {
        const item = document.createElement("li");
        const link = document.createElement("a");
        link.href = ROOT + hit.url;
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
      more.href = `${ROOT}/search?q=${encodeURIComponent(text)}`;
      more.textContent = data.total ? `All ${data.total} results` : "No results: paste the traceback instead";
      if (!data.total) more.href = `${ROOT}/match`;
      all.append(more);
      list.replaceChildren(...items, all);
      list.hidden = false;
    }, 180);
  });
  box.addEventListener("keydown", (event) => { if (event.key === "Escape") hide(); });
  document.addEventListener("click", (event) => { if (!list.contains(event.target) && event.target !== box) hide(); });

  // The editor: problems, preview and the signature tester follow the text as it is typed.
  const editor = document.querySelector("section.editor");
  if (editor) {
    const source = document.getElementById("markdown");
    const paste = document.getElementById("paste");
    const problems = document.getElementById("problems");
    const count = document.getElementById("problem-count");
    const preview = document.getElementById("preview");
    const tester = document.getElementById("tester");
    let latest = 0;
    let unsaved = false;

    const goToLine = (line) => {
      const lines = source.value.split("\n");
      const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
      source.focus();
      source.setSelectionRange(start, start + (lines[line - 1] || "").length);
      const height = source.scrollHeight / Math.max(lines.length, 1);
      source.scrollTop = Math.max(0, (line - 5) * height);
    };
    problems.addEventListener("click", (event) => {
      const button = event.target.closest("button.line");
      if (button) goToLine(Number(button.dataset.line));
    });

    const text = (tag, value, className) => {
      const node = document.createElement(tag);
      if (className) node.className = className;
      node.textContent = value;
      return node;
    };
    const showProblems = (list) => {
      count.textContent = String(list.length);
      if (!list.length) {
        problems.replaceChildren(text("li", "No problems found.", "none"));
        return;
      }
      problems.replaceChildren(...list.map((p) => {
        const item = document.createElement("li");
        item.className = p.severity;
        const button = text("button", `line ${p.line}`, "line");
        button.type = "button";
        button.dataset.line = String(p.line);
        item.append(button, " ", p.message);
        return item;
      }));
    };
    const showTester = (result) => {
      if (!result) { tester.replaceChildren(); return; }
      const verdict = text("p", result.verdict, result.draft_wins ? "verdict wins" : "verdict");
      const hits = document.createElement("ol");
      hits.className = "tester-hits";
      for (const h of result.hits) {
        const item = document.createElement("li");
        const who = h.draft ? text("strong", "this draft") : text("a", h.entry_id);
        if (!h.draft) who.href = `${ROOT}/entries/${h.entry_id}`;
        const pct = Math.round(h.confidence * 100);
        item.append(who, ` ${pct}%${h.known ? "" : " (below the threshold)"}: signatures[${h.signature}] matched `,
          text("code", h.matched_text), ` in the ${h.matched_in} error`);
        hits.append(item);
      }
      tester.replaceChildren(verdict, hits, ...result.problems.map((p) => text("p", p, "note")));
    };

    const check = async () => {
      const ticket = ++latest;
      const response = await fetch(`${ROOT}/api/v1/drafts/check`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": editor.dataset.csrf },
        body: JSON.stringify({
          markdown: source.value,
          entry_id: editor.dataset.entryId || null,
          paste: paste.value || null,
        }),
      });
      if (!response.ok || ticket !== latest) return;
      const data = await response.json();
      showProblems(data.problems);
      preview.innerHTML = data.html;  // rendered by the server with raw HTML off
      showTester(data.tester);
      editor.dataset.checked = String(ticket);
    };
    let timer;
    const soon = () => { clearTimeout(timer); timer = setTimeout(check, 350); };
    source.addEventListener("input", () => { unsaved = true; soon(); });
    paste.addEventListener("input", soon);
    document.getElementById("edit-form").addEventListener("submit", () => { unsaved = false; });
    window.addEventListener("beforeunload", (event) => { if (unsaved) event.preventDefault(); });
  }
})();
