// BAP page agent. Reviewed, fixed code that the server installs in an
// isolated world of each frame (page scripts cannot see or change it, and
// clients can never run JavaScript). It only reads the DOM, except for the
// documented action helpers (focus, select, scroll, set value) that the
// server calls to carry out an act request.
//
// Elements are referred to by small integers (indices in `nodes`) that are
// never reused within the world's lifetime; the server maps them to opaque
// nd_ handles bound to the document epoch.
(() => {
  'use strict';
  if (globalThis.__bap) return;

  const nodes = [null];
  const index = new WeakMap();
  const reg = (el) => {
    let i = index.get(el);
    if (i === undefined) {
      i = nodes.length;
      nodes.push(el);
      index.set(el, i);
    }
    return i;
  };
  const get = (i) => nodes[i] || null;

  const norm = (s) => (s ? String(s).replace(/\s+/g, ' ').trim() : '');
  const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);

  const INTERACTIVE = new Set([
    'button', 'link', 'textbox', 'searchbox', 'checkbox', 'radio', 'combobox', 'listbox',
    'option', 'slider', 'spinbutton', 'switch', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'treeitem', 'scrollbar',
  ]);
  // Roles whose accessible name comes from their content.
  const FROM_CONTENT = new Set([
    'button', 'link', 'heading', 'cell', 'gridcell', 'columnheader', 'rowheader', 'option',
    'tab', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'treeitem', 'tooltip', 'switch',
    'checkbox', 'radio', 'row', 'caption', 'term', 'legend',
  ]);
  // Roles kept in interactive mode besides the interactive ones.
  const CONTEXT = new Set(['heading', 'iframe', 'dialog', 'alertdialog', 'alert']);
  // Roles never shown as nodes (their content is hoisted).
  const TRANSPARENT = new Set(['', 'generic', 'none', 'presentation', 'rowgroup']);
  const VALID_ROLES = new Set([
    'alert', 'alertdialog', 'application', 'article', 'banner', 'blockquote', 'button', 'caption',
    'cell', 'checkbox', 'code', 'columnheader', 'combobox', 'complementary', 'contentinfo',
    'definition', 'deletion', 'dialog', 'directory', 'document', 'emphasis', 'feed', 'figure',
    'form', 'generic', 'grid', 'gridcell', 'group', 'heading', 'img', 'image', 'insertion', 'link',
    'list', 'listbox', 'listitem', 'log', 'main', 'marquee', 'math', 'menu', 'menubar', 'menuitem',
    'menuitemcheckbox', 'menuitemradio', 'meter', 'navigation', 'none', 'note', 'option',
    'paragraph', 'presentation', 'progressbar', 'radio', 'radiogroup', 'region', 'row',
    'rowgroup', 'rowheader', 'scrollbar', 'search', 'searchbox', 'separator', 'slider',
    'spinbutton', 'status', 'strong', 'subscript', 'superscript', 'switch', 'tab', 'table',
    'tablist', 'tabpanel', 'term', 'textbox', 'time', 'timer', 'toolbar', 'tooltip', 'tree',
    'treegrid', 'treeitem',
  ]);
  const BLOCK = new Set([
    'DIV', 'P', 'LI', 'TD', 'TH', 'TR', 'BR', 'H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'SECTION',
    'ARTICLE', 'HEADER', 'FOOTER', 'NAV', 'MAIN', 'ASIDE', 'UL', 'OL', 'TABLE', 'FORM', 'DT',
    'DD', 'DL', 'FIELDSET', 'LEGEND', 'BLOCKQUOTE', 'PRE', 'FIGURE', 'FIGCAPTION', 'ADDRESS',
    'HR', 'CAPTION', 'OPTION', 'LABEL', 'SUMMARY', 'DETAILS', 'DIALOG',
  ]);
  const SKIP = new Set(['SCRIPT', 'STYLE', 'TEMPLATE', 'NOSCRIPT', 'HEAD', 'META', 'LINK', 'TITLE']);
  const TEXT_INPUTS = new Set(['', 'text', 'search', 'email', 'url', 'tel', 'password', 'number']);

  const inputType = (el) => (el.getAttribute('type') || 'text').toLowerCase();

  const explicitRole = (el) => {
    const r = el.getAttribute('role');
    if (!r) return null;
    for (const t of r.trim().toLowerCase().split(/\s+/)) {
      if (VALID_ROLES.has(t)) return t === 'img' ? 'image' : t;
    }
    return null;
  };

  const implicitRole = (el) => {
    switch (el.tagName) {
      case 'A': case 'AREA': return el.hasAttribute('href') ? 'link' : '';
      case 'BUTTON': return 'button';
      case 'INPUT': {
        switch (inputType(el)) {
          case 'button': case 'submit': case 'reset': case 'image': case 'file': case 'color':
            return 'button';
          case 'checkbox': return 'checkbox';
          case 'radio': return 'radio';
          case 'range': return 'slider';
          case 'number': return 'spinbutton';
          case 'hidden': return '';
          case 'search': return el.hasAttribute('list') ? 'combobox' : 'searchbox';
          default: return el.hasAttribute('list') ? 'combobox' : 'textbox';
        }
      }
      case 'SELECT': return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
      case 'TEXTAREA': return 'textbox';
      case 'OPTION': return 'option';
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6': return 'heading';
      case 'IMG': return el.getAttribute('alt') === '' && !el.hasAttribute('title') ? '' : 'image';
      case 'SVG': case 'svg': return el.querySelector(':scope > title') ? 'image' : '';
      case 'TABLE': return 'table';
      case 'TR': return 'row';
      case 'TD': return 'cell';
      case 'TH': {
        const sc = (el.getAttribute('scope') || '').toLowerCase();
        if (sc === 'row' || sc === 'rowgroup') return 'rowheader';
        if (sc === 'col' || sc === 'colgroup') return 'columnheader';
        return el.parentElement && el.parentElement.parentElement &&
          el.parentElement.parentElement.tagName === 'TBODY' && el.cellIndex === 0 &&
          el.parentElement.cells.length > 1 && el.parentElement.cells[1].tagName === 'TD'
          ? 'rowheader' : 'columnheader';
      }
      case 'THEAD': case 'TBODY': case 'TFOOT': return 'rowgroup';
      case 'UL': case 'OL': case 'MENU': return 'list';
      case 'LI': return 'listitem';
      case 'NAV': return 'navigation';
      case 'MAIN': return 'main';
      case 'HEADER': return el.closest('article,aside,main,nav,section') ? '' : 'banner';
      case 'FOOTER': return el.closest('article,aside,main,nav,section') ? '' : 'contentinfo';
      case 'ASIDE': return 'complementary';
      case 'FORM': return 'form';
      case 'SEARCH': return 'search';
      case 'SECTION':
        return el.hasAttribute('aria-label') || el.hasAttribute('aria-labelledby') ? 'region' : '';
      case 'ARTICLE': return 'article';
      case 'DIALOG': return 'dialog';
      case 'FIELDSET': case 'DETAILS': case 'OPTGROUP': return 'group';
      case 'SUMMARY': return 'button';
      case 'P': return 'paragraph';
      case 'BLOCKQUOTE': return 'blockquote';
      case 'FIGURE': return 'figure';
      case 'PROGRESS': return 'progressbar';
      case 'METER': return 'meter';
      case 'HR': return 'separator';
      case 'IFRAME': case 'FRAME': return 'iframe';
      case 'OUTPUT': return 'status';
      case 'CAPTION': return 'caption';
      case 'DL': return 'list';
      case 'DT': return 'term';
      case 'DD': return 'definition';
      case 'CODE': return 'code';
      case 'TIME': return 'time';
      default: break;
    }
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) {
      return 'textbox';
    }
    return '';
  };

  const roleOf = (el) => {
    const r = explicitRole(el);
    if (r !== null) {
      // A focusable element with role none/presentation keeps its implicit role.
      if ((r === 'none' || r === 'presentation') && el.tabIndex >= 0 && el.hasAttribute('tabindex')) {
        return implicitRole(el);
      }
      return r;
    }
    return implicitRole(el);
  };

  const isFocusableGeneric = (el) =>
    (el.hasAttribute('tabindex') && el.tabIndex >= 0) || el.hasAttribute('onclick');

  // VISIBLE asks checkVisibility to count visibility:hidden as not rendered (one options object,
  // not one per call).
  const VISIBLE = Object.freeze({ visibilityProperty: true });
  // How a walk treats an element (look): SHOWN is rendered and visible; THROUGH has no box of its
  // own (display:contents) and is visible, so its content is walked as its parent's; HIDDEN is
  // visibility:hidden, whose own text is not seen though a descendant may be visible again; GONE
  // has no box and nothing in it can be seen (display:none, content-visibility:hidden and the
  // like).
  const SHOWN = 0, THROUGH = 1, HIDDEN = 2, GONE = 3;
  const look = (e) => {
    if (e.checkVisibility(VISIBLE)) return SHOWN;
    if (e.checkVisibility()) return HIDDEN;
    const cs = getComputedStyle(e);
    if (cs.display !== 'contents') return GONE;
    return cs.visibility === 'visible' ? THROUGH : HIDDEN;
  };
  // mayShow tells whether interactive mode may show e, whose own role is r0: the roles it keeps,
  // frames, a focusable generic, and what the browser's accessibility tree may give another role
  // (askable).
  const mayShow = (e, tag, r0) => INTERACTIVE.has(r0) || CONTEXT.has(r0) || tag === 'IFRAME' ||
    tag === 'FRAME' || (TRANSPARENT.has(r0) && isFocusableGeneric(e)) || askable(e, r0);

  // Children in the flat tree: open shadow roots and slotted content.
  const kids = (n) => {
    if (n.nodeType === 1) {
      if (n.shadowRoot) return n.shadowRoot.childNodes;
      if (n.tagName === 'SLOT') {
        const a = n.assignedNodes({ flatten: true });
        return a.length ? a : n.childNodes;
      }
    }
    return n.childNodes;
  };

  // eachKid calls fn with each of n's children in the flat tree (kids), stopping when it returns
  // false. Plain children are walked by sibling links: a NodeList's iterator costs an object per
  // child, a tenth of a 5,000-element snapshot.
  const eachKid = (n, fn) => {
    if (n.nodeType === 1 && (n.shadowRoot || n.tagName === 'SLOT')) {
      for (const c of kids(n)) if (fn(c) === false) return;
      return;
    }
    for (let c = n.firstChild; c !== null; c = c.nextSibling) if (fn(c) === false) return;
  };

  // eachKidElement is eachKid over the element children only. In the agent's isolated world every
  // node the walk touches costs a lookup of its wrapper, and the text between elements is about
  // half of a page's nodes; interactive mode shows no text.
  const eachKidElement = (n, fn) => {
    if (n.nodeType === 1 && (n.shadowRoot || n.tagName === 'SLOT')) {
      for (const c of kids(n)) if (c.nodeType === 1 && fn(c) === false) return;
      return;
    }
    for (let c = n.firstElementChild; c !== null; c = c.nextElementSibling) if (fn(c) === false) return;
  };

  // Visible text of a subtree, for names and text queries. With visibleOnly (a name from the
  // element's own content), the text of a visibility:hidden descendant is left out, as the
  // browser's accessible name leaves it out: a page cannot put words a person does not see into
  // a control's name. A descendant of it that is visible again counts. Referenced content
  // (aria-labelledby, a label) keeps its hidden text, as in the browser.
  const textOf = (root, limit, skip, visibleOnly) => {
    let out = '';
    let hidden = false; // inside a visibility:hidden element (visibleOnly): its text is left out
    const walk = (n) => eachKid(n, step);
    const walkHidden = (n, h) => {
      const outer = hidden;
      hidden = h;
      walk(n);
      hidden = outer;
    };
    const step = (c) => {
      if (out.length >= limit) return false;
      const type = c.nodeType;
      if (type === 3) {
        if (!hidden) out += c.data;
      } else if (type === 1) {
        const tag = c.tagName;
        if (c === skip || SKIP.has(tag)) return true;
        if (c.getAttribute('aria-hidden') === 'true') return true;
        const v = look(c);
        if (v === GONE) return true;
        if (visibleOnly && v === HIDDEN) {
          walkHidden(c, true);
          return true;
        }
        const al = c.getAttribute('aria-label');
        if (al) { out += ' ' + al + ' '; return true; }
        if (tag === 'IMG') { out += ' ' + (c.getAttribute('alt') || '') + ' '; return true; }
        if (tag === 'INPUT') {
          const t = inputType(c);
          if (t === 'submit' || t === 'button' || t === 'reset') out += ' ' + c.value + ' ';
          return true;
        }
        if (tag === 'SELECT' || tag === 'TEXTAREA') return true;
        const block = BLOCK.has(tag);
        if (block) out += ' ';
        walkHidden(c, false);
        if (block) out += ' ';
      }
      return true;
    };
    walk(root);
    return norm(out);
  };

  const byIdRef = (el, ids) => {
    const root = el.getRootNode();
    const parts = [];
    for (const id of ids.trim().split(/\s+/)) {
      const r = (root.getElementById ? root.getElementById(id) : null) || document.getElementById(id);
      if (r) parts.push(r.getAttribute('aria-label') || textOf(r, 500));
    }
    return norm(parts.join(' '));
  };

  const labelText = (el) => {
    if (!el.labels || !el.labels.length) return '';
    return norm(Array.from(el.labels, (l) => textOf(l, 500, el)).join(' '));
  };

  const nameOf = (el, role) => {
    let v = el.getAttribute('aria-labelledby');
    if (v) { v = byIdRef(el, v); if (v) return v; }
    v = norm(el.getAttribute('aria-label'));
    if (v) return v;
    const tag = el.tagName;
    switch (tag) {
      case 'INPUT': {
        const t = inputType(el);
        if (t === 'submit' || t === 'reset' || t === 'button') {
          return norm(el.value) || labelText(el) || (t === 'submit' ? 'Submit' : t === 'reset' ? 'Reset' : '');
        }
        if (t === 'image') return norm(el.alt) || norm(el.value) || 'Submit';
        return labelText(el) || norm(el.getAttribute('title')) || norm(el.getAttribute('placeholder'));
      }
      case 'SELECT': case 'TEXTAREA': case 'METER': case 'PROGRESS': case 'OUTPUT':
        return labelText(el) || norm(el.getAttribute('title')) || norm(el.getAttribute('placeholder'));
      case 'BUTTON':
        v = labelText(el);
        if (v) return v;
        break;
      case 'IMG': case 'AREA':
        return norm(el.getAttribute('alt')) || norm(el.getAttribute('title'));
      case 'FIELDSET': {
        const lg = el.querySelector(':scope > legend');
        if (lg) return textOf(lg, 500);
        break;
      }
      case 'TABLE':
        if (el.caption) return textOf(el.caption, 500);
        break;
      case 'FIGURE': {
        const fc = el.querySelector(':scope > figcaption');
        if (fc) return textOf(fc, 500);
        break;
      }
      case 'IFRAME': case 'FRAME':
        return norm(el.getAttribute('title')) || norm(el.getAttribute('name'));
      case 'svg': case 'SVG': {
        const t = el.querySelector(':scope > title');
        if (t) return norm(t.textContent);
        break;
      }
      default: break;
    }
    if (FROM_CONTENT.has(role)) {
      v = textOf(el, 500, null, true);
      if (v) return v;
    }
    return norm(el.getAttribute('title'));
  };

  const deepActive = () => {
    let a = document.activeElement;
    while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
    return a;
  };

  const isDisabled = (el) => {
    if (el.getAttribute('aria-disabled') === 'true') return true;
    try { return el.matches(':disabled'); } catch (e) { return false; }
  };

  const valueOf = (el, role) => {
    const tag = el.tagName;
    if (tag === 'INPUT') {
      const t = inputType(el);
      if (t === 'password') return el.value ? '••••••' : '';
      if (t === 'checkbox' || t === 'radio' || t === 'submit' || t === 'button' || t === 'reset' || t === 'image') return '';
      if (t === 'file') return el.files ? Array.from(el.files, (f) => f.name).join(', ') : '';
      return el.value;
    }
    if (tag === 'TEXTAREA') return el.value;
    if (tag === 'SELECT') {
      return Array.from(el.selectedOptions, (o) => norm(o.label || o.text)).join(', ');
    }
    if (role === 'textbox' && el.isContentEditable) return textOf(el, 1000, null, true);
    const vn = el.getAttribute('aria-valuetext') || el.getAttribute('aria-valuenow');
    if (vn && (role === 'slider' || role === 'spinbutton' || role === 'progressbar' || role === 'meter' || role === 'scrollbar')) return vn;
    if (tag === 'PROGRESS' || tag === 'METER') return String(el.value);
    return '';
  };

  // shortURL gives a link's target relative to the page when it stays on the
  // page's origin (a snapshot carries hundreds of links).
  // hrefOf is a link's absolute URL: an SVG <a>'s href is an SVGAnimatedString, whose baseVal is
  // resolved against the document's base URL as the browser resolves it when followed.
  const hrefOf = (a) => {
    const h = a.href;
    if (typeof h === 'string') return h;
    const raw = h && typeof h.baseVal === 'string' ? h.baseVal : '';
    try {
      return new URL(raw, document.baseURI).href;
    } catch (e) {
      return raw;
    }
  };

  // The page's origin is read once per snapshot (ORIGIN); the link's own origin is its href's
  // prefix up to the path, which spares parsing every href a second time.
  let ORIGIN = null;
  const shortURL = (a) => {
    const u = hrefOf(a);
    const o = ORIGIN === null ? location.origin : ORIGIN;
    if (o !== 'null' && u.startsWith(o) && (u.length === o.length || u.charCodeAt(o.length) === 47)) {
      return u.slice(o.length) || '/';
    }
    return u;
  };

  const triState = (s) => (s === 'true' ? 1 : s === 'mixed' ? 2 : s === 'false' ? 0 : undefined);

  // Custom elements (their role and states may live in ElementInternals,
  // which no script sees, and their properties belong to the page's world)
  // and the controls inside shadow trees (labels may cross the boundary)
  // are described by the browser's own accessibility tree: the server asks
  // it for the elements a first walk lists (ask) and walks again with the
  // answers (ax: index → state).
  let AX = null;
  let ASK = null;
  const askable = (e, role) => e.localName.indexOf('-') > 0 ||
    (role && !TRANSPARENT.has(role) && e.getRootNode() !== document);
  // axFor returns the browser's view of e, or null; in a first walk it
  // lists e for the server.
  const axFor = (e, role) => {
    if (AX) {
      const k = index.get(e);
      return k === undefined ? null : AX[k] || null;
    }
    if (ASK && ASK.length < 400 && askable(e, role)) ASK.push(reg(e));
    return null;
  };
  // axRole is the role to use given the browser's view.
  const axRole = (role, ov) => (ov ? (ov.ig ? '' : ov.r) : role);

  const elements = (idx) => idx.map((i) => nodes[i] || null);

  // SECRETS maps each field a secret was typed into to the secret's reference (this isolated
  // world's own map: the page can neither read nor change it). Such a field is read as the
  // reference, never its value, and drawn masked in screenshots.
  const SECRETS = new WeakMap();
  const secretMark = (ref) => '[secret ' + ref + ']';
  const markSecret = (i, ref) => {
    const e = editTarget(i);
    if (!e) return { st: 'nonode' };
    if (e.tagName !== 'INPUT' && e.tagName !== 'TEXTAREA') return { st: 'nottext' };
    SECRETS.set(e, ref);
    e.style.setProperty('-webkit-text-security', 'disc', 'important');
    return { st: 'ok' };
  };

  // applyAX puts the browser's name and states over the agent's reading.
  const applyAX = (el, o, ov, extra) => {
    if (!ov || ov.ig || !ov.r) return;
    if (ov.n) o.n = ov.n; else delete o.n;
    if (ov.v && el.localName.indexOf('-') > 0 && !SECRETS.has(el)) o.v = ov.v;
    for (const k of ['ch', 'pr', 'e', 's']) {
      if (ov[k] !== undefined) o[k] = ov[k];
    }
    if (ov.d) o.d = 1;
    if (ov.q) o.q = 1;
    if (ov.ro) o.ro = 1;
    if (ov.l) o.l = ov.l;
    if (ov.de && extra) o.de = ov.de;
  };

  // describe fills the compact record of one element.
  const describe = (el, role, o, active, extra, ov) => {
    const name = nameOf(el, role);
    if (name) o.n = clip(name, 200);
    const tag = el.tagName;
    const v = SECRETS.has(el) ? secretMark(SECRETS.get(el)) : valueOf(el, role);
    if (v) o.v = clip(v, 200);
    if (tag === 'INPUT') {
      const t = inputType(el);
      if (t !== 'text' && t !== 'checkbox' && t !== 'radio') o.ty = t;
      if (t === 'checkbox' || t === 'radio') o.ch = el.indeterminate ? 2 : el.checked ? 1 : 0;
    }
    if (o.ch === undefined && (role === 'checkbox' || role === 'radio' || role === 'switch' || role === 'menuitemcheckbox' || role === 'menuitemradio')) {
      const c = triState(el.getAttribute('aria-checked'));
      if (c !== undefined) o.ch = c;
    }
    if (role === 'switch' && o.ch === undefined) {
      const c = triState(el.getAttribute('aria-pressed'));
      if (c !== undefined) o.ch = c;
    }
    if (role === 'button') {
      const p = triState(el.getAttribute('aria-pressed'));
      if (p !== undefined) o.pr = p;
    }
    if (isDisabled(el)) o.d = 1;
    const ex = el.getAttribute('aria-expanded');
    if (ex === 'true') o.e = 1; else if (ex === 'false') o.e = 0;
    else if (tag === 'SUMMARY' && el.parentElement && el.parentElement.tagName === 'DETAILS') o.e = el.parentElement.open ? 1 : 0;
    if (el === active) o.f = 1;
    if (el.required || el.getAttribute('aria-required') === 'true') o.q = 1;
    if (el.readOnly === true || el.getAttribute('aria-readonly') === 'true') o.ro = 1;
    const sel = el.getAttribute('aria-selected');
    if (sel === 'true') o.s = 1; else if (sel === 'false' && role === 'tab') o.s = 0;
    else if (tag === 'OPTION' && el.selected) o.s = 1;
    if (role === 'heading') {
      const lv = parseInt(el.getAttribute('aria-level') || tag.slice(1), 10);
      if (lv > 0) o.l = lv;
    }
    if (role === 'link' && el.href) o.u = clip(shortURL(el), 300);
    const ph = el.getAttribute('placeholder');
    if (ph && norm(ph) !== o.n) o.p = clip(norm(ph), 100);
    if (tag === 'SELECT' && extra) {
      const opts = [];
      for (const op of el.options) {
        if (opts.length >= 50) break;
        opts.push(clip(norm(op.label || op.text), 80));
      }
      o.o = opts;
    }
    const desc = el.getAttribute('aria-describedby');
    if (desc && extra) {
      const d = byIdRef(el, desc);
      if (d) o.de = clip(d, 200);
    }
    applyAX(el, o, ov, extra);
  };

  // snapshot walks the flat tree below root and returns compact records.
  const snapshot = (opts) => {
    AX = opts.ax || null;
    ASK = AX ? null : [];
    ORIGIN = location.origin;
    try {
      const res = snapshotWalk(opts);
      if (ASK && ASK.length) res.ask = ASK;
      return res;
    } finally {
      AX = null;
      ASK = null;
      ORIGIN = null;
    }
  };

  const snapshotWalk = (opts) => {
    const full = opts.mode === 'full';
    const max = opts.max || 5000;
    const active = deepActive();
    let count = 0;
    let truncated = false;
    const rootEl = opts.within ? get(opts.within) : document.documentElement;
    if (!rootEl || !rootEl.isConnected) return { stale: true };

    // visit appends the records of n's content to out.
    const visit = full
      ? (n, out, textParent) => eachKid(n, (c) => child(c, out, textParent))
      : (n, out, textParent) => eachKidElement(n, (c) => child(c, out, textParent));

    // child appends the records of one child node; false once the walk is truncated.
    const child = (c, out, textParent) => {
      if (count >= max) { truncated = true; return false; }
      const type = c.nodeType;
      if (type === 3) {
        if (!full || !textParent) return true;
        const t = norm(c.data);
        if (!t) return true;
        const last = out.length ? out[out.length - 1] : null;
        if (last && last.r === 'text') {
          last.n = clip(last.n + ' ' + t, 400);
        } else {
          out.push({ r: 'text', n: clip(t, 400) });
          count++;
        }
        return true;
      }
      if (type === 1) el(c, out, textParent);
      return true;
    };

    // textParent says whether the text children of the node being walked are shown: true, false
    // (interactive mode, or inside a node named from its content, whose name holds the text), or
    // UNSEEN inside a visibility:hidden element (its text is not, but a descendant's may be
    // visible again). hiddenText and seenText turn it as the walk enters such an element or
    // leaves it.
    const UNSEEN = 0;
    const hiddenText = (textParent) => (textParent === true ? UNSEEN : textParent);
    const seenText = (textParent) => (textParent === UNSEEN ? true : textParent);

    // shown tells whether e is rendered and visible; when it is not, it walks the content that
    // may still be (look).
    const shown = (e, out, textParent) => {
      const v = look(e);
      if (v === SHOWN) return true;
      if (v !== GONE) visit(e, out, v === THROUGH ? seenText(textParent) : hiddenText(textParent));
      return false;
    };

    const el = (e, out, textParent) => {
      const tag = e.tagName;
      if (SKIP.has(tag)) return;
      if (e.getAttribute('aria-hidden') === 'true' || e.hasAttribute('inert')) return;
      // A select's options are shown as the select's (and have no box of their own to check).
      if ((tag === 'OPTION' || tag === 'OPTGROUP') && e.closest('select')) return;
      const r0 = roleOf(e);
      // Whether an element is rendered is a third of a walk's cost, so interactive mode asks only
      // of an element it may show. One it walks through unasked cannot hide its content from
      // the check: a descendant of a display:none or content-visibility:hidden element has no
      // box, and visibility is inherited. Full mode shows text, so it asks of every element.
      if (full) {
        if (!shown(e, out, textParent)) return;
        textParent = seenText(textParent);
      } else if (mayShow(e, tag, r0) && !shown(e, out, textParent)) {
        return;
      }
      const ov = axFor(e, r0);
      let role = axRole(r0, ov);
      let interactive = INTERACTIVE.has(role);
      if (!interactive && TRANSPARENT.has(role) && isFocusableGeneric(e)) {
        interactive = true;
        role = role || 'generic';
      }
      const isFrame = tag === 'IFRAME' || tag === 'FRAME';
      let include;
      if (interactive || isFrame) include = true;
      else if (full) include = !TRANSPARENT.has(role);
      else include = CONTEXT.has(role);
      if (!include) {
        visit(e, out, textParent);
        return;
      }
      // In interactive mode only actionable nodes (and frames and dialogs,
      // usable as scopes) carry handles; context nodes such as headings do
      // not.
      const o = (interactive || isFrame || full || role === 'dialog' || role === 'alertdialog') ? { i: reg(e), r: role } : { r: role };
      count++;
      describe(e, role, o, active, true, ov);
      if (isFrame) { o.fr = 1; out.push(o); return; }
      let children = [];
      // Text inside a node named from its content is already its name.
      visit(e, children, full && !FROM_CONTENT.has(role) && role !== 'textbox');
      if (o.n && children.length) {
        if (interactive) {
          // An image or text that only repeats the control's name.
          children = children.filter((c) => c.c || c.n !== o.n || INTERACTIVE.has(c.r));
        } else if (children.length === 1 && children[0].n === o.n) {
          // A heading around a link of the same name: the link carries it.
          delete o.n;
        }
      }
      if (!full && !interactive && !o.n && role === 'heading' && children.length === 1) {
        // Interactive mode: a heading that only wraps a control adds nothing
        // the control does not say.
        out.push(children[0]);
        return;
      }
      if (children.length === 1 && children[0].r === 'text' && !children[0].i && !o.n) {
        o.x = children[0].n;
      } else if (children.length) {
        o.c = children;
      }
      out.push(o);
    };

    const out = [];
    if (opts.within) {
      if (rootEl.nodeType === 1) {
        const tag = rootEl.tagName;
        if (tag === 'IFRAME' || tag === 'FRAME') {
          // The server stitches the frame's own snapshot.
          return { u: location.href, t: document.title, n: out, tr: false, wf: 1 };
        } else {
          visit(rootEl, out, full);
        }
      }
    } else if (document.documentElement) {
      visit(document.documentElement, out, full);
    }
    return { u: location.href, t: document.title, n: out, tr: truncated };
  };

  // ---- queries ----

  const matcher = (want, exact) => {
    const w = norm(want);
    const wl = w.toLowerCase();
    // returns 0 (no match), 1 (substring), 2 (case-insensitive equal), 3 (equal)
    return (have) => {
      if (!have) return 0;
      const h = norm(have);
      if (h === w) return 3;
      if (exact) return 0;
      const hl = h.toLowerCase();
      if (hl === wl) return 2;
      return hl.includes(wl) ? 1 : 0;
    };
  };

  const ownText = (e) => {
    let s = '';
    eachKid(e, (c) => { if (c.nodeType === 3) s += c.data; });
    return norm(s);
  };

  const roleMatches = (have, want) => {
    if (have === want) return true;
    if (want === 'img') return have === 'image';
    if (want === 'textbox') return have === 'searchbox';
    return false;
  };

  const query = (q) => {
    AX = q.ax || null;
    ASK = AX ? null : [];
    try {
      const res = queryWalk(q);
      if (ASK && ASK.length) res.ask = ASK;
      return res;
    } finally {
      AX = null;
      ASK = null;
    }
  };

  const queryWalk = (q) => {
    const limit = q.limit || 50;
    const rootEl = q.within ? get(q.within) : document.documentElement;
    if (!rootEl || !rootEl.isConnected) return { stale: true };
    const want = {
      role: q.role ? q.role.toLowerCase() : '',
      name: q.name ? matcher(q.name, q.exact) : null,
      text: q.text ? matcher(q.text, q.exact) : null,
      label: q.label ? matcher(q.label, q.exact) : null,
      ph: q.placeholder ? matcher(q.placeholder, q.exact) : null,
      tid: q.testId || '',
    };
    const found = [];
    const active = deepActive();
    const consider = (e) => {
      let score = 0;
      let role = null;
      const r0 = roleOf(e);
      const ov = axFor(e, r0);
      const roleOfE = () => axRole(r0, ov);
      const nameOfE = (r) => (ov && !ov.ig && ov.r ? ov.n || '' : nameOf(e, r));
      if (want.tid) {
        const t = e.getAttribute('data-testid') || e.getAttribute('data-test-id') || e.getAttribute('data-test');
        if (t !== want.tid) return;
        score += 3;
      }
      if (want.ph) {
        const m = want.ph(e.getAttribute('placeholder'));
        if (!m) return;
        score += m;
      }
      if (want.role) {
        role = roleOfE() || (isFocusableGeneric(e) ? 'generic' : '');
        if (!roleMatches(role, want.role)) return;
      }
      if (want.label) {
        let m = want.label(labelText(e));
        if (!m) {
          const lb = e.getAttribute('aria-labelledby');
          if (lb) m = want.label(byIdRef(e, lb));
        }
        if (!m) m = want.label(e.getAttribute('aria-label'));
        if (!m) return;
        score += m;
      }
      if (want.name) {
        if (role === null) role = roleOfE();
        const m = want.name(nameOfE(role));
        if (!m) return;
        score += m;
      }
      if (want.text) {
        if (role === null) role = roleOfE();
        let m = want.text(ownText(e));
        if (!m && (INTERACTIVE.has(role) || role === 'heading' || role === 'cell' || role === 'columnheader' || role === 'listitem' || role === 'label' || e.tagName === 'LABEL')) {
          m = want.text(textOf(e, 2000, null, true));
        }
        if (!m && e.tagName === 'INPUT') {
          const t = inputType(e);
          if (t === 'submit' || t === 'button' || t === 'reset') m = want.text(e.value);
        }
        if (!m) return;
        score += m;
      }
      if (role === null) role = roleOfE();
      const interactive = INTERACTIVE.has(role);
      const o = { i: reg(e), r: role || 'generic', sc: score + (interactive ? 0.5 : 0) };
      describe(e, role || 'generic', o, active, true, ov);
      found.push(o);
    };
    const walk = (n) => eachKidElement(n, step);
    const step = (c) => {
      if (SKIP.has(c.tagName)) return;
      if (c.getAttribute('aria-hidden') === 'true' || c.hasAttribute('inert')) return;
      const v = look(c);
      if (v === SHOWN) consider(c);
      if (v !== GONE) walk(c);
    };
    if (q.within) consider(rootEl);
    walk(rootEl);
    // Among text matches, keep the innermost element (drop ancestors of
    // another match with an equal or better score).
    let res = found;
    if (want.text && !want.role && !want.name) {
      const set = new Set(found.map((o) => nodes[o.i]));
      res = found.filter((o) => {
        const e = nodes[o.i];
        for (const other of set) {
          if (other !== e && e.contains(other)) return false;
        }
        return true;
      });
    }
    res.sort((a, b) => b.sc - a.sc);
    return { u: location.href, n: res.slice(0, limit) };
  };

  // ---- actions ----

  const raf = () => new Promise((r) => {
    let done = false;
    const fin = () => { if (!done) { done = true; r(); } };
    requestAnimationFrame(fin);
    setTimeout(fin, 50);
  });

  const describeEl = (e) => {
    if (!e || e.nodeType !== 1) return 'another element';
    let s = e.tagName.toLowerCase();
    if (e.id) s += '#' + e.id;
    else if (e.classList && e.classList.length) s += '.' + Array.from(e.classList).slice(0, 2).join('.');
    return s;
  };

  // composedContains tells whether inner is outer or inside it in the flat
  // tree: slotted content counts as inside the slot's ancestors (a
  // component's option renders its light-DOM text through its own slots).
  const composedContains = (outer, inner) => {
    for (let n = inner; n; n = n.assignedSlot || n.parentNode || n.host) {
      if (n === outer) return true;
    }
    return false;
  };

  const deepHit = (x, y) => {
    let h = document.elementFromPoint(x, y);
    while (h && h.shadowRoot) {
      const d = h.shadowRoot.elementFromPoint(x, y);
      if (!d || d === h) break;
      h = d;
    }
    return h;
  };

  // hostOf is the shadow host of the tree e lives in, or null.
  const hostOf = (e) => {
    const r = e.getRootNode();
    return r && r.host ? r.host : null;
  };

  const flatParent = (n) => n.assignedSlot || n.parentNode || n.host;

  // sideEffecting: an element whose own activation navigates or submits a
  // form (a link, a form's submit button). A click that lands on one is its
  // action, not the target's, and the approval rules judged the target.
  const sideEffecting = (n) => {
    if (n.nodeType !== 1) return false;
    if ((n.tagName === 'A' || n.tagName === 'AREA') && n.hasAttribute('href')) return true;
    if (n.tagName === 'BUTTON') return !!n.form && (n.getAttribute('type') || 'submit').toLowerCase() === 'submit';
    if (n.tagName === 'INPUT') return !!n.form && ['submit', 'image'].includes(inputType(n));
    return false;
  };

  // within tells whether h is stop or inside it in the flat tree with no
  // side-effecting element in between other than the allowed ones.
  const within = (stop, h, e, tgt) => {
    for (let n = h; n; n = flatParent(n)) {
      if (n === stop) return true;
      if (n !== e && n !== tgt && sideEffecting(n)) return false;
    }
    return false;
  };

  // hitOK tells whether h, the element at the action's point, lets a
  // pointer action reach e (tgt: the control e stands for). It does when h
  // is e, tgt or inside one of them in the flat tree; when h is a shadow
  // host e lives in (the hit test retargets content slotted into a
  // component to the component itself); and when h is inside a label that
  // forwards activation to the control. A link or submit button in between
  // (a page nesting one in a label or a component) would take the click for
  // itself: that covers e, as anything else does.
  const hitOK = (e, tgt, h) => {
    if (!h) return false;
    if (within(e, h, e, tgt) || (tgt && tgt !== e && within(tgt, h, e, tgt))) return true;
    for (let x = hostOf(e); x; x = hostOf(x)) {
      if (x === h) return true;
    }
    for (let n = h; n; n = flatParent(n)) {
      if (n !== e && n !== tgt && sideEffecting(n)) return false;
      if (n.tagName === 'LABEL' && n.control && (n.control === tgt || n.control === e)) return true;
    }
    return false;
  };

  const checkable = (e) => !!e && e.tagName === 'INPUT' && (inputType(e) === 'checkbox' || inputType(e) === 'radio');

  // proxyPoint finds, for a checkbox or radio button that a person cannot
  // hit itself (visually hidden, or covered by its styled box), what they
  // would click instead: a visible label of it, else the component that
  // hosts it. It returns the point, or null.
  const proxyPoint = (e, tgt) => {
    const cands = [];
    if (tgt.labels) for (const l of tgt.labels) cands.push(l);
    for (let x = hostOf(tgt); x; x = hostOf(x)) cands.push(x);
    const vw = window.innerWidth, vh = window.innerHeight;
    for (const c of cands) {
      if (!c.checkVisibility({ visibilityProperty: true })) continue;
      let r = c.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) continue;
      if (r.top < 0 || r.left < 0 || r.bottom > vh || r.right > vw) {
        c.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
        r = c.getBoundingClientRect();
      }
      const left = Math.max(r.left, 0), top = Math.max(r.top, 0);
      const right = Math.min(r.right, vw), bottom = Math.min(r.bottom, vh);
      if (right <= left || bottom <= top) continue;
      const x = (left + right) / 2, y = (top + bottom) / 2;
      const h = deepHit(x, y);
      if (h && (within(c, h, e, tgt) || hitOK(e, tgt, h))) return { x, y };
    }
    return null;
  };

  const editable = (e) => {
    if (e.tagName === 'INPUT') return !['checkbox', 'radio', 'submit', 'button', 'reset', 'image', 'file', 'hidden', 'range', 'color'].includes(inputType(e));
    if (e.tagName === 'TEXTAREA') return true;
    return e.isContentEditable;
  };

  // target returns the element an action should use for i: the control of
  // a label, itself otherwise.
  const target = (i) => {
    const e = get(i);
    if (!e) return null;
    if (e.tagName === 'LABEL' && e.control) return e.control;
    return e;
  };

  const VALUE_INPUTS = ['date', 'time', 'datetime-local', 'month', 'week', 'color', 'range'];
  const fillable = (e) => editable(e) || (e.tagName === 'INPUT' && VALUE_INPUTS.includes(inputType(e)));

  // editTarget is the field an edit of element i goes to: the element (or
  // a label's control) when it is one, else the first visible field inside
  // the component it is (its open shadow trees): a text field component's
  // host stands for its inner input.
  const editTarget = (i) => {
    const e = target(i);
    if (!e || fillable(e) || !e.shadowRoot) return e;
    const find = (root) => {
      for (const c of root.querySelectorAll('*')) {
        if (fillable(c) && c.checkVisibility({ visibilityProperty: true })) return c;
        if (c.shadowRoot) {
          const f = find(c.shadowRoot);
          if (f) return f;
        }
      }
      return null;
    };
    return find(e.shadowRoot) || e;
  };

  // animating tells whether a finite CSS animation or transition runs on e
  // or on one of its flat-tree ancestors (endless ones, such as spinners,
  // never end and do not count).
  const animating = (e) => {
    let anims;
    try { anims = document.getAnimations(); } catch (err) { return false; }
    for (const a of anims) {
      if (a.playState !== 'running' || !a.effect || !a.effect.target) continue;
      const end = a.effect.getComputedTiming().endTime;
      if (!(end < Infinity)) continue;
      if (composedContains(a.effect.target, e)) return true;
    }
    return false;
  };

  // check runs one actionability check of element i for an action and, when
  // it passes, returns the point to use (in this frame's viewport).
  const check = async (i, action) => {
    const e = get(i);
    if (!e) return { st: 'nonode' };
    if (!e.isConnected) return { st: 'detached' };
    if (action === 'focus' || action === 'press_key' && false) return { st: 'ok' };
    if (action !== 'scroll_into_view' && action !== 'upload_file' && action !== 'focus' && action !== 'select_option') {
      if (isDisabled(e) || (e.tagName === 'LABEL' && e.control && isDisabled(e.control))) return { st: 'disabled' };
    }
    if (action === 'select_option' && isDisabled(e)) return { st: 'disabled' };
    if (action === 'fill' || action === 'clear') {
      const t = editTarget(i);
      if (!fillable(t)) return { st: 'noteditable' };
      if (t.readOnly || t.getAttribute('aria-readonly') === 'true') return { st: 'readonly' };
    }
    if (action === 'upload_file') return { st: 'ok' };
    const pointer = action === 'click' || action === 'hover' || action === 'check' || action === 'uncheck';
    const vis = e.checkVisibility({ visibilityProperty: true });
    const r0 = e.getBoundingClientRect();
    if (!vis || r0.width === 0 || r0.height === 0) {
      if (action === 'select_option' || action === 'fill' || action === 'clear') {
        // A hidden native control driven by a visible widget is still a target.
        if (!vis) return { st: 'hidden' };
      } else {
        const tgt = target(i);
        const p = pointer && action !== 'hover' && checkable(tgt) ? proxyPoint(e, tgt) : null;
        if (p) return { st: 'ok', x: p.x, y: p.y };
        return { st: 'hidden' };
      }
    }
    if (action === 'scroll_into_view' || action === 'select_option') return { st: 'ok' };
    const vw = window.innerWidth, vh = window.innerHeight;
    let r1 = r0;
    if (r0.bottom <= 0 || r0.right <= 0 || r0.top >= vh || r0.left >= vw || r0.top < 0 || r0.left < 0 || r0.bottom > vh || r0.right > vw) {
      e.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
      r1 = e.getBoundingClientRect();
    }
    let r2 = r1;
    if (pointer) {
      // Stable: no finite animation or transition running on it or an
      // ancestor (a dialog sliding or fading in ignores clicks until it is
      // shown), and the same box in two consecutive animation frames.
      if (animating(e)) return { st: 'unstable' };
      await raf();
      r2 = e.getBoundingClientRect();
      if (r1.x !== r2.x || r1.y !== r2.y || r1.width !== r2.width || r1.height !== r2.height) return { st: 'unstable' };
    }
    if (r2.width === 0 || r2.height === 0) return { st: 'hidden' };
    // Click the middle of the visible part of the box.
    const left = Math.max(r2.left, 0), top = Math.max(r2.top, 0);
    const right = Math.min(r2.right, vw), bottom = Math.min(r2.bottom, vh);
    if (right <= left || bottom <= top) return { st: 'offscreen' };
    const x = (left + right) / 2, y = (top + bottom) / 2;
    if (!pointer) return { st: 'ok', x, y };
    const h = deepHit(x, y);
    const tgt = target(i);
    if (!hitOK(e, tgt, h)) {
      const p = action !== 'hover' && checkable(tgt) ? proxyPoint(e, tgt) : null;
      if (p) return { st: 'ok', x: p.x, y: p.y };
      return { st: 'covered', by: describeEl(h) };
    }
    return { st: 'ok', x, y };
  };

  // frameBox returns the top-left of the content box of iframe i and whether
  // the point (x, y) of the frame's viewport lands in it.
  const frameBox = (i, px, py) => {
    const e = get(i);
    if (!e || !e.isConnected) return { st: 'detached' };
    const r = e.getBoundingClientRect();
    const cs = getComputedStyle(e);
    const x = r.left + e.clientLeft + parseFloat(cs.paddingLeft);
    const y = r.top + e.clientTop + parseFloat(cs.paddingTop);
    const res = { st: 'ok', x, y };
    if (px !== undefined) {
      const h = deepHit(x + px, y + py);
      if (h !== e) res.cov = describeEl(h);
    }
    return res;
  };

  const focus = (i) => {
    const e = target(i);
    if (!e) return false;
    e.focus({ preventScroll: false });
    return deepActive() === e;
  };

  // selectText prepares a fill: focuses the control and selects its content.
  const selectText = (i) => {
    const e = editTarget(i);
    if (!e) return { st: 'nonode' };
    e.focus();
    if (e.tagName === 'INPUT' || e.tagName === 'TEXTAREA') {
      try { e.select(); } catch (err) { /* number inputs */ }
      try { e.setSelectionRange(0, e.value.length); } catch (err) { /* not all types */ }
      return { st: 'ok', empty: e.value === '' };
    }
    const s = window.getSelection();
    const rng = document.createRange();
    rng.selectNodeContents(e);
    s.removeAllRanges();
    s.addRange(rng);
    return { st: 'ok', empty: e.textContent === '' };
  };

  const fire = (e, type) => e.dispatchEvent(new Event(type, { bubbles: true, composed: type === 'input' }));

  // setValue sets the value of a control that has no text editing (date,
  // color, range…) or clears one, firing input and change like a user would.
  const setValue = (i, v) => {
    const e = editTarget(i);
    if (!e) return { st: 'nonode' };
    e.focus();
    if (e.isContentEditable && e.tagName !== 'INPUT' && e.tagName !== 'TEXTAREA') {
      e.textContent = v;
    } else {
      e.value = v;
      if (v !== '' && e.value !== v) return { st: 'badvalue' };
    }
    fire(e, 'input');
    fire(e, 'change');
    return { st: 'ok' };
  };

  const textKind = (i) => {
    const e = editTarget(i);
    if (!e) return '';
    if (e.tagName === 'INPUT') return TEXT_INPUTS.has(inputType(e)) ? 'text' : 'value';
    return 'text';
  };

  const selectOption = (i, values) => {
    let e = target(i);
    if (!e) return { st: 'nonode' };
    if (e.tagName !== 'SELECT') return { st: 'notselect' };
    const opts = Array.from(e.options);
    const picked = [];
    const missing = [];
    for (const v of values) {
      let o = opts.find((op) => op.value === v) || opts.find((op) => norm(op.label) === norm(v)) ||
        opts.find((op) => norm(op.label).toLowerCase() === norm(v).toLowerCase());
      if (!o) { missing.push(v); continue; }
      if (o.disabled) { missing.push(v); continue; }
      picked.push(o);
    }
    if (missing.length) return { st: 'missing', missing, options: opts.slice(0, 50).map((o) => norm(o.label)) };
    if (!e.multiple && picked.length > 1) return { st: 'multiple' };
    e.focus();
    for (const o of opts) o.selected = picked.includes(o);
    fire(e, 'input');
    fire(e, 'change');
    return { st: 'ok', selected: picked.map((o) => norm(o.label)) };
  };

  // checkedState reads the checked state of element i: v is true, false or
  // null (not checkable as far as the DOM tells); ax asks the server to
  // take the browser's accessibility tree's word for it (custom elements and
  // controls inside components, whose state may live on the host).
  const checkedState = (i) => {
    const e = target(i);
    if (!e) return { st: 'nonode' };
    const ax = e.localName.indexOf('-') > 0 || e.getRootNode() !== document;
    if (checkable(e)) return { st: 'ok', v: e.checked, ax };
    const a = e.getAttribute('aria-checked') || e.getAttribute('aria-pressed');
    if (a === 'true') return { st: 'ok', v: true, ax };
    if (a === 'false') return { st: 'ok', v: false, ax };
    return { st: 'ok', v: null, ax };
  };

  // box scrolls element i into view and returns its border box in the frame's viewport.
  const box = (i) => {
    const e = get(i);
    if (!e || !e.isConnected) return { st: 'detached' };
    e.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return { st: 'hidden' };
    return { st: 'ok', x: r.left, y: r.top, w: r.width, h: r.height };
  };

  const scrollIntoView = (i) => {
    const e = get(i);
    if (!e) return false;
    e.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
    return true;
  };

  const fileInput = (i) => {
    const e = target(i);
    if (e && e.tagName === 'INPUT' && inputType(e) === 'file') return e;
    return null;
  };

  // classify tells what an action on element i would do.
  const classify = (i, action, key) => {
    const e = target(i);
    if (!e) return { st: 'nonode' };
    let effect = 'any_action';
    if (action === 'upload_file') effect = 'file_upload';
    else if (action === 'click') {
      let b = e;
      if (!(b.tagName === 'BUTTON' || b.tagName === 'INPUT')) b = e.closest ? e.closest('button,input[type=submit],input[type=image]') : null;
      if (b && b.form) {
        const t = b.tagName === 'BUTTON' ? (b.getAttribute('type') || 'submit').toLowerCase() : inputType(b);
        if (t === 'submit' || t === 'image') effect = 'form_submission';
      }
    } else if (action === 'press_key' && /(^|\+)Enter$/.test(key || '')) {
      const a = e || deepActive();
      if (a && a.form && a.tagName === 'INPUT') effect = 'form_submission';
      if (a && a.tagName === 'BUTTON' && a.form && (a.getAttribute('type') || 'submit').toLowerCase() === 'submit') effect = 'form_submission';
    }
    return { st: 'ok', effect, origin: location.origin };
  };

  // ---- extraction ----

  const visibleText = (i) => {
    const e = i ? get(i) : document.body || document.documentElement;
    if (!e) return { st: 'nonode' };
    if (SECRETS.has(e)) return { st: 'ok', v: secretMark(SECRETS.get(e)) };
    if (e.tagName === 'INPUT' || e.tagName === 'TEXTAREA') return { st: 'ok', v: inputType(e) === 'password' ? '' : e.value };
    if (e.tagName === 'SELECT') return { st: 'ok', v: valueOf(e, 'combobox') };
    const t = e.innerText !== undefined ? e.innerText : e.textContent;
    return { st: 'ok', v: t || '' };
  };

  const cellText = (c) => norm(c.innerText !== undefined ? c.innerText : c.textContent);

  const table = (i) => {
    let e = i ? get(i) : document.querySelector('table');
    if (!e) return { st: i ? 'nonode' : 'notable' };
    if (e.tagName !== 'TABLE') {
      const t = e.closest('table') || e.querySelector('table');
      if (!t) return { st: 'notable' };
      e = t;
    }
    const rows = Array.from(e.rows).filter((r) => r.closest('table') === e);
    const expand = (r) => {
      const out = [];
      for (const c of r.cells) {
        const txt = cellText(c);
        const span = Math.min(c.colSpan || 1, 50);
        for (let k = 0; k < span; k++) out.push(k === 0 ? txt : '');
      }
      return out;
    };
    let header = null;
    let body = rows;
    const thead = e.tHead;
    if (thead && thead.rows.length) {
      header = expand(thead.rows[thead.rows.length - 1]);
      body = rows.filter((r) => r.parentElement !== thead);
    } else if (rows.length && Array.from(rows[0].cells).every((c) => c.tagName === 'TH')) {
      header = expand(rows[0]);
      body = rows.slice(1);
    }
    const data = body.map(expand).filter((r) => r.length);
    const width = Math.max(header ? header.length : 0, ...data.map((r) => r.length), 0);
    if (!header) {
      header = [];
      for (let k = 0; k < width; k++) header.push('column_' + (k + 1));
    }
    for (let k = header.length; k < width; k++) header.push('column_' + (k + 1));
    return { st: 'ok', columns: header, rows: data.map((r) => { while (r.length < width) r.push(''); return r; }) };
  };

  const attributes = (i) => {
    const e = get(i);
    if (!e) return { st: 'nonode' };
    const out = {};
    for (const a of e.attributes) out[a.name] = a.value;
    if (SECRETS.has(e)) out.value = secretMark(SECRETS.get(e)); // never the secret typed into it
    else if (e.tagName === 'INPUT' && inputType(e) === 'password') delete out.value;
    else if ('value' in e && (e.tagName === 'INPUT' || e.tagName === 'TEXTAREA' || e.tagName === 'SELECT')) out.value = e.value;
    if (e.href) out.href = hrefOf(e);
    return { st: 'ok', v: out };
  };

  const links = (i) => {
    const root = i ? get(i) : document.documentElement;
    if (!root) return { st: 'nonode' };
    const out = [];
    // Only a link is asked whether it is rendered (as interactive observe does): an element
    // walked through unasked cannot hide a link from the check.
    const walk = (n) => eachKidElement(n, step);
    const step = (c) => {
      if (out.length >= 5000) return false;
      if (SKIP.has(c.tagName)) return true;
      if ((c.tagName === 'A' || c.tagName === 'AREA') && c.hasAttribute('href')) {
        const v = look(c);
        if (v === GONE) return true;
        if (v === SHOWN) out.push({ i: reg(c), t: clip(nameOf(c, 'link'), 300), u: hrefOf(c) });
      }
      walk(c);
      return true;
    };
    walk(root);
    return { st: 'ok', v: out };
  };

  // fieldValue is the value of the best match of a schema field: a
  // control's value (checked state for checkboxes), else its text.
  const fieldValue = (i) => {
    const e = get(i);
    if (!e) return { st: 'nonode' };
    const t = target(i);
    if (SECRETS.has(t)) return { st: 'ok', v: secretMark(SECRETS.get(t)) };
    if (t.tagName === 'INPUT') {
      const ty = inputType(t);
      if (ty === 'checkbox' || ty === 'radio') return { st: 'ok', v: t.checked, b: true };
      if (ty === 'password') return { st: 'ok', v: '' };
      return { st: 'ok', v: t.value };
    }
    if (t.tagName === 'TEXTAREA') return { st: 'ok', v: t.value };
    if (t.tagName === 'SELECT') return { st: 'ok', v: valueOf(t, 'combobox') };
    return { st: 'ok', v: norm(e.innerText !== undefined ? e.innerText : e.textContent) };
  };

  const contains = (a, b) => {
    const x = get(a), y = get(b);
    return !!(x && y && composedContains(x, y));
  };

  const info = () => ({ u: location.href, t: document.title, o: location.origin });

  globalThis.__bap = {
    snapshot, query, check, frameBox, focus, selectText, setValue, markSecret, textKind, selectOption,
    checkedState, scrollIntoView, box, fileInput, classify, visibleText, table, attributes, links,
    fieldValue, info, get, reg, contains, elements,
  };
})();
