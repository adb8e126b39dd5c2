// CodeMirror's styles without a <style> element. style-mod (which CodeMirror uses for its base
// theme) writes a document's styles into a <style> element, which a Content-Security-Policy of
// `style-src 'self'` refuses; it uses a constructed stylesheet only for shadow roots. This puts
// a document's styles into a constructed stylesheet too (CSSOM, which that policy allows), with
// style-mod's own rule order: the same placement algorithm, applied to `sheet.insertRule`.
import { StyleModule } from "style-mod";

const sets = new WeakMap();  // document or shadow root -> { sheet, modules }

StyleModule.mount = (root, modules, _options) => {
  let set = sets.get(root);
  if (!set) {
    const doc = root.ownerDocument || root;
    set = { sheet: new doc.defaultView.CSSStyleSheet(), modules: [] };
    sets.set(root, set);
  }
  const list = Array.isArray(modules) ? modules : [modules];
  let pos = 0;  // the current rule offset
  let j = 0;  // the index into set.modules
  for (const mod of list) {
    let index = set.modules.indexOf(mod);
    if (index < j && index > -1) {  // mounted before, now wanted later: move it
      const start = set.modules.slice(0, index).reduce((n, m) => n + m.rules.length, 0);
      for (let k = 0; k < mod.rules.length; k++) set.sheet.deleteRule(start);
      pos -= mod.rules.length;
      set.modules.splice(index, 1);
      j--;
      index = -1;
    }
    if (index === -1) {
      set.modules.splice(j++, 0, mod);
      for (const rule of mod.rules) set.sheet.insertRule(rule, pos++);
    } else {
      while (j < index) pos += set.modules[j++].rules.length;
      pos += mod.rules.length;
      j++;
    }
  }
  // First among the adopted sheets, as style-mod does: the page's own rules come later.
  if (!root.adoptedStyleSheets.includes(set.sheet)) {
    root.adoptedStyleSheets = [set.sheet, ...root.adoptedStyleSheets];
  }
};
