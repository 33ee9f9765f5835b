// Small DOM builders: every text goes in as a text node, never as HTML.

export type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | ((e: Event) => void) | undefined>;

function build<E extends Element>(el: E, attrs: Attrs, children: (Child | Child[])[]): E {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// h builds an HTML element.
export function h(tag: string, attrs: Attrs = {}, ...children: (Child | Child[])[]): HTMLElement {
  return build(document.createElement(tag), attrs, children);
}

// svg builds an SVG element.
export function svg(tag: string, attrs: Attrs = {}, ...children: (Child | Child[])[]): SVGElement {
  return build(document.createElementNS("http://www.w3.org/2000/svg", tag), attrs, children);
}

// link builds an anchor to a route of the UI.
export function link(route: string, ...children: Child[]): HTMLElement {
  return h("a", { href: "#" + route }, ...children);
}

// route joins path segments, escaping each.
export function route(...parts: string[]): string {
  return "/" + parts.map(encodeURIComponent).join("/");
}

export function table(head: string[], rows: HTMLElement[], attrs: Attrs = {}): HTMLElement {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: head.length, class: "muted" }, "none"))),
  );
}

export function section(title: string, ...children: (Child | Child[])[]): HTMLElement {
  return h("section", {}, h("h2", {}, title), ...children);
}

// ago says how long ago an RFC 3339 time was.
export function ago(t?: string | null): string {
  if (!t) return "-";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(t)) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}
