// Loaded in <head> without `defer`, before the page is drawn: the theme a reader chose on an
// earlier visit applies from the first paint (no flash of the other one). No choice yet: the
// stylesheet follows the system's prefers-color-scheme.
(() => {
  "use strict";
  try {
    const chosen = localStorage.getItem("pitfalls-theme");
    if (chosen === "light" || chosen === "dark") document.documentElement.dataset.theme = chosen;
  } catch {
    // Storage refused (a private window, a policy): the system's scheme it is.
  }
})();
