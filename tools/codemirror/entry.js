// What the wiki editor (static/editor.js) imports, bundled into one ES module so that the page
// loads a single same-origin file with no eval and no inline script (the site's CSP allows
// neither). The markdown language is taken without `markdown()`, which would pull in the HTML,
// CSS and JavaScript languages (150 KB) for HTML inside Markdown, which entries do not use.
import "./csp-styles.js";  // first: CodeMirror's styles in a constructed sheet, never a <style>

export { EditorState } from "@codemirror/state";
export {
  EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter,
  drawSelection, highlightSpecialChars,
} from "@codemirror/view";
export { defaultKeymap, history, historyKeymap } from "@codemirror/commands";
export { LanguageSupport, syntaxHighlighting, bracketMatching } from "@codemirror/language";
export {
  markdownLanguage, insertNewlineContinueMarkup, deleteMarkupBackward,
} from "@codemirror/lang-markdown";
export { yamlFrontmatter } from "@codemirror/lang-yaml";
export { lintGutter, setDiagnostics, forEachDiagnostic } from "@codemirror/lint";
export { search, searchKeymap, highlightSelectionMatches } from "@codemirror/search";
// Tokens get `tok-*` classes, which static/style.css colours for the light and the dark theme.
export { classHighlighter } from "@lezer/highlight";
