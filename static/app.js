// The little JavaScript Pitfalls has; every page also works without it.
(() => {
  "use strict";
  // The path the site is served under ("" or a proxy's sub-path such as "/kb").
  const ROOT = document.body.dataset.root || "";

  // The "Saved" notice belongs to the save that led here, not to a reload or a copied link.
  if (document.getElementById("saved")) {
    const url = new URL(location.href);
    url.searchParams.delete("saved");
    history.replaceState(history.state, "", url);
  }

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

  // A traceback pasted into the search box goes to its answer on /match: a search box keeps
  // one line, and a paste is read best whole.
  const searchBox = document.getElementById("q");
  if (searchBox) {
    searchBox.addEventListener("paste", (event) => {
      const text = event.clipboardData ? event.clipboardData.getData("text") : "";
      if (!text.trim().includes("\n")) return;
      event.preventDefault();
      const form = document.createElement("form");
      form.method = "post";
      form.action = ROOT + "/match";
      form.hidden = true;
      const field = document.createElement("textarea");
      field.name = "text";
      field.value = text;
      form.append(field);
      document.body.append(form);
      form.submit();
    });
  }

  // The light/dark switch: the choice is kept in localStorage and applied before the first paint
  // by static/theme.js; until someone chooses, the system's prefers-color-scheme decides.
  const toggle = document.getElementById("theme-toggle");
  if (toggle) {
    const system = matchMedia("(prefers-color-scheme: dark)");
    const current = () => document.documentElement.dataset.theme || (system.matches ? "dark" : "light");
    const label = () => {
      const other = current() === "dark" ? "light" : "dark";
      toggle.textContent = other === "dark" ? "Dark theme" : "Light theme";
      toggle.setAttribute("aria-label", `Switch to the ${other} theme`);
    };
    toggle.addEventListener("click", () => {
      const next = current() === "dark" ? "light" : "dark";
      document.documentElement.dataset.theme = next;
      try { localStorage.setItem("pitfalls-theme", next); } catch { /* kept for this page only */ }
      label();
    });
    system.addEventListener("change", label);
    label();
    toggle.hidden = false;
  }

  // A copy button on every code block, in a bar above it: never over the code's last characters.
  for (const pre of document.querySelectorAll("main pre")) {
    const wrapper = document.createElement("div");
    wrapper.className = "code-block";
    pre.parentNode.insertBefore(wrapper, pre);
    const bar = document.createElement("div");
    bar.className = "code-bar";
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
    bar.append(button);
    wrapper.append(bar, pre);
  }

  // Results as you type, from the JSON API, under the search box in the header: a listbox that
  // the arrow keys walk, Enter opens and Escape closes; the focus stays in the box.
  const box = document.getElementById("q");
  const list = document.getElementById("live-results");
  if (!box || !list) return;
  let timer = 0;
  let latest = 0;
  let active = -1;
  const options = () => [...list.querySelectorAll("[role=option]")];
  const choose = (index) => {
    const all = options();
    active = all.length ? (index + all.length) % all.length : -1;
    all.forEach((option, i) => option.setAttribute("aria-selected", String(i === active)));
    if (active >= 0) {
      box.setAttribute("aria-activedescendant", all[active].id);
      all[active].scrollIntoView({ block: "nearest" });
    } else {
      box.removeAttribute("aria-activedescendant");
    }
  };
  const hide = () => {
    list.hidden = true;
    list.replaceChildren();
    active = -1;
    box.removeAttribute("aria-activedescendant");
    box.setAttribute("aria-expanded", "false");
  };
  const option = (index, link) => {
    const item = document.createElement("li");
    item.id = `live-option-${index}`;
    item.setAttribute("role", "option");
    item.setAttribute("aria-selected", "false");
    link.tabIndex = -1;  // the box keeps the focus; arrows move the choice
    item.append(link);
    return item;
  };
  const results = (total) => (total === 1 ? "The 1 result" : `All ${total} results`);
  list.setAttribute("role", "listbox");
  list.setAttribute("aria-label", "Matching entries");
  box.setAttribute("role", "combobox");
  box.setAttribute("aria-controls", "live-results");
  box.setAttribute("aria-autocomplete", "list");
  box.setAttribute("aria-expanded", "false");
  box.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const text = box.value.trim();
      if (!text) { hide(); return; }
      const ticket = ++latest;
      const response = await fetch(`${ROOT}/api/v1/search?limit=8&q=${encodeURIComponent(text)}`);
      if (!response.ok || ticket !== latest) return;
      const data = await response.json();
      const items = data.hits.map((hit, index) => {
        const link = document.createElement("a");
        link.href = ROOT + hit.url;
        link.textContent = hit.title;
        const kind = document.createElement("span");
        kind.className = "kind";
        kind.textContent = hit.kind;
        const item = option(index, link);
        item.append(" ", kind);
        return item;
      });
      const more = document.createElement("a");
      more.href = `${ROOT}/search?q=${encodeURIComponent(text)}`;
      more.textContent = data.total ? results(data.total) : "No results: paste the traceback instead";
      if (!data.total) more.href = `${ROOT}/match`;
      const all = option(items.length, more);
      all.classList.add("all");
      list.replaceChildren(...items, all);
      list.hidden = false;
      box.setAttribute("aria-expanded", "true");
      active = -1;
      box.removeAttribute("aria-activedescendant");
    }, 180);
  });
  box.addEventListener("keydown", (event) => {
    if (event.key === "Escape") { hide(); return; }
    if (list.hidden) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      choose(event.key === "ArrowDown" ? active + 1 : (active < 0 ? -1 : active - 1));
    } else if (event.key === "Enter" && active >= 0) {
      event.preventDefault();  // open the chosen entry, not the search page
      window.location.assign(options()[active].querySelector("a").href);
    }
  });
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
      // The code editor (editor.js), when it has replaced the textarea, moves its own cursor.
      const moved = new CustomEvent("editor-goto", { detail: { line }, cancelable: true });
      if (!source.dispatchEvent(moved)) return;
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
        item.dataset.line = String(p.line);
        const button = text("button", `line ${p.line}`, "line");
        button.type = "button";
        button.dataset.line = String(p.line);
        item.append(button, " ", text("span", p.message, "message"));
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
  // After a click from search (`?h=` on the entry's link), the query's words are marked in
  // the entry, as MkDocs Material does: only text nodes, never markup, never inside code
  // that is a link or a form; the words are matched as text, never read as HTML or a pattern.
  const wanted = new URLSearchParams(location.search).get("h");
  const entry = document.querySelector("article.entry");
  if (wanted && entry) {
    const OPERATORS = new Set(["and", "or", "not", "to"]);
    const words = [];
    for (let word of wanted.slice(0, 500).split(/\s+/)) {
      if (/^-|^(?:tags?|kind|id):/i.test(word)) continue; // exclusions and filters
      word = word.replace(/^-?[A-Za-z_]+:/, "").replace(/^[-"'“”(\[]+|["'“”)\].,;:!?]+$/g, "");
      const lowered = word.toLowerCase();
      if ((word.length >= 3 || /[\u3400-\u9fff]/.test(word)) && !OPERATORS.has(lowered)) {
        if (!words.includes(lowered)) words.push(lowered);
      }
    }
    const escaped = words.slice(0, 16).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    if (escaped.length) {
      const pattern = new RegExp(escaped.join("|"), "gi");
      const walker = document.createTreeWalker(entry, NodeFilter.SHOW_TEXT, {
        acceptNode: (node) =>
          node.parentElement.closest("script, style, textarea, input, button, mark, form, .entry-head")
            ? NodeFilter.FILTER_REJECT
            : NodeFilter.FILTER_ACCEPT,
      });
      const nodes = [];
      while (walker.nextNode()) nodes.push(walker.currentNode);
      let first = null;
      for (const node of nodes) {
        const text = node.nodeValue;
        pattern.lastIndex = 0;
        if (!pattern.test(text)) continue;
        pattern.lastIndex = 0;
        const pieces = document.createDocumentFragment();
        let at = 0;
        for (const found of text.matchAll(pattern)) {
          pieces.append(document.createTextNode(text.slice(at, found.index)));
          const mark = document.createElement("mark");
          mark.className = "search-hit";
          mark.textContent = found[0];
          pieces.append(mark);
          first = first || mark;
          at = found.index + found[0].length;
        }
        pieces.append(document.createTextNode(text.slice(at)));
        node.replaceWith(pieces);
      }
      if (first && !location.hash) first.scrollIntoView({ block: "center" });
    }
  }
})();
