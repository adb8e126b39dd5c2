// The wiki editor's code view: CodeMirror in place of the entry's textarea, with line numbers,
// soft wrap, Markdown highlighting (YAML in the front-matter) and the live check's problems at
// their lines. The textarea stays in the form and is kept equal to the text, so saving posts
// exactly what the page without JavaScript posts; app.js goes on checking it as it changes.
import {
  EditorState, EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter,
  drawSelection, highlightSpecialChars, defaultKeymap, history, historyKeymap, LanguageSupport,
  syntaxHighlighting, bracketMatching, markdownLanguage, insertNewlineContinueMarkup,
  deleteMarkupBackward, yamlFrontmatter, lintGutter, setDiagnostics, search, searchKeymap,
  highlightSelectionMatches, classHighlighter,
} from "./vendor/codemirror/codemirror.js";

const section = document.querySelector("section.editor");
const source = document.getElementById("markdown");
const problems = document.getElementById("problems");

// The problems list (drawn by the server, redrawn by app.js after each check) as diagnostics:
// one per problem, over the whole of its line.
const diagnostics = (doc) => [...problems.querySelectorAll("li[data-line]")].map((item) => {
  const number = Math.min(Math.max(Number(item.dataset.line) || 1, 1), doc.lines);
  const line = doc.line(number);
  const message = item.querySelector(".message");
  return {
    from: line.from,
    to: line.to,
    severity: item.classList.contains("warning") ? "warning" : "error",
    message: message ? message.textContent : item.textContent,
    source: "check",
  };
});

const start = () => {
  const keepTextarea = EditorView.updateListener.of((update) => {
    if (!update.docChanged) return;
    source.value = update.state.doc.toString();
    source.dispatchEvent(new Event("input", { bubbles: true }));  // app.js checks the new text
  });
  const view = new EditorView({
    state: EditorState.create({
      doc: source.value,
      extensions: [
        lineNumbers(),
        highlightActiveLineGutter(),
        lintGutter(),
        highlightSpecialChars(),
        history(),
        drawSelection(),
        bracketMatching(),
        highlightActiveLine(),
        highlightSelectionMatches(),
        search({ top: true }),
        yamlFrontmatter({ content: new LanguageSupport(markdownLanguage) }),
        syntaxHighlighting(classHighlighter),
        EditorView.lineWrapping,
        EditorView.contentAttributes.of({
          "aria-labelledby": "markdown-label",
          spellcheck: "false",
        }),
        keymap.of([
          { key: "Enter", run: insertNewlineContinueMarkup },
          { key: "Backspace", run: deleteMarkupBackward },
          ...defaultKeymap,
          ...historyKeymap,
          ...searchKeymap,
        ]),
        keepTextarea,
      ],
    }),
  });
  view.dom.id = "markdown-editor";
  source.after(view.dom);
  source.hidden = true;
  // A hidden required field would block the submit with nothing to point at; the server
  // refuses an empty entry with a message anyway.
  source.required = false;

  const showProblems = () => view.dispatch(setDiagnostics(view.state, diagnostics(view.state.doc)));
  new MutationObserver(showProblems).observe(problems, { childList: true, subtree: true });
  showProblems();

  // A problem's "line N" button (app.js) moves this editor's cursor, not the hidden textarea's.
  source.addEventListener("editor-goto", (event) => {
    event.preventDefault();
    const doc = view.state.doc;
    const line = doc.line(Math.min(Math.max(event.detail.line, 1), doc.lines));
    view.dispatch({
      selection: { anchor: line.from, head: line.to },
      effects: EditorView.scrollIntoView(line.from, { y: "center" }),
    });
    view.focus();
  });
  section.dataset.codeEditor = "ready";
};

if (section && source && problems) start();
