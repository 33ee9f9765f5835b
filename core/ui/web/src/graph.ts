// The fleet graph. Clusters are grouped by a registry label (region, env…)
// or by their meshes; a collapsed group is one node with its clusters'
// aggregate state, an expanded one shows its clusters (coloured by state)
// with their meshes and destinations, and the cross-cluster edges policies
// create join what is shown. The reader filters by cluster, namespace and
// destination; everything sorts naturally (c2 before c10), and the layout
// fits the width it is given, so no column is ever cut off.
//
// The seam for overlays such as live traffic: nodeAnchor returns where an
// edge to a destination or a cluster ends on the graph as last laid out,
// and onLayout calls a function after every layout with the graph's SVG,
// where an overlay adds its own layer and redraws from nodeAnchor. The
// coordinates are the SVG's user units, which are CSS pixels from its
// top-left corner (its viewBox is its size).
import { clusterState, type ClusterStatus, type Status } from "./api";
import { h, route, svg } from "./dom";

// GraphDestination is a Service the graph shows inside its cluster.
export interface GraphDestination {
  cluster: string;
  namespace: string;
  name: string;
}

// GraphEdge is a cross-cluster relation a policy creates: traffic from
// clients in `from` to a destination in `to`.
export interface GraphEdge {
  from: string;
  to: string;
  // destination is "namespace/name" in `to`, when the edge ends at one.
  destination?: string;
  kind: string;
  policy: string;
}

// Anchor is a point of the graph, in its SVG's coordinates.
export interface Anchor {
  x: number;
  y: number;
}

const collator = new Intl.Collator("en", { numeric: true, sensitivity: "base" });

// natural orders strings with their runs of digits compared as numbers
// (c2 before c10), ignoring case; ties break on the code points.
export function natural(a: string, b: string): number {
  return collator.compare(a, b) || (a < b ? -1 : a > b ? 1 : 0);
}

// Geometry, in CSS pixels.
const pad = 12; // around the drawing
const gap = 16; // between nodes
const groupW = 240;
const groupH = 98;
const bandHead = 40; // an expanded group's header
const clusterMinW = 250;
const headH = 58; // a cluster box's name and meshes
const rowH = 24;
const maxRows = 12; // destinations drawn per cluster
const maxClusters = 48; // clusters drawn per expanded group
const edgeRoom = 44; // above each row of nodes, for the edges' arcs, when there are edges
const charW = 7; // an average character at 12px

// A fleet of at most smallFleet clusters starts with every group expanded;
// a filter that leaves at most smallFilter clusters expands their groups.
const smallFleet = 12;
const smallFilter = 24;

// none is the group of the clusters without the grouping's label or mesh.
const none = "-";

// States from the most to the least severe: a group takes its worst.
const severity = ["revoked", "disconnected", "stale", "safe-mode", "connected"];

interface Group {
  key: string;
  title: string;
  clusters: ClusterStatus[]; // shown, in natural order
  total: number; // before filtering
  destinations: number; // shown
  states: Map<string, number>;
  errors: number; // clusters with apply errors
  worst: string;
}

// Layout is where the last drawing put each node, for nodeAnchor.
interface Layout {
  svg: SVGSVGElement;
  groupOf: Map<string, string>; // shown cluster → its group's key
  groups: Map<string, Anchor>; // collapsed group → its node's top
  clusters: Map<string, Anchor>; // drawn cluster → its box's top
  rows: Map<string, Anchor>; // "cluster/namespace/name" → its row's left end
}

let layout: Layout | undefined;
const listeners = new Set<(svg: SVGSVGElement) => void>();

// nodeAnchor returns where an edge to a destination ends on the graph as
// last laid out: the left end of the destination's row when it is drawn;
// else the middle of the top of its cluster's box (the cluster is drawn
// but the destination is past the rows shown); else the middle of the top
// of the collapsed group holding the cluster. With namespace and name
// empty it answers for the cluster itself. It returns undefined when the
// cluster is filtered out, or not drawn for being past the clusters an
// expanded group draws.
export function nodeAnchor(cluster: string, namespace = "", name = ""): Anchor | undefined {
  if (!layout) return undefined;
  if (namespace || name) {
    const row = layout.rows.get(`${cluster}/${namespace}/${name}`);
    if (row) return row;
  }
  const box = layout.clusters.get(cluster);
  if (box) return box;
  const group = layout.groupOf.get(cluster);
  return group === undefined ? undefined : layout.groups.get(group);
}

// onLayout calls fn with the graph's SVG after every layout (a redraw on
// news, a filter, a resize, a group expanded or collapsed), and at once
// when the graph is shown, and returns a function that stops it. The SVG
// is new at each layout; an overlay adds its own layer to it, after the
// nodes and the policies' edges.
export function onLayout(fn: (svg: SVGSVGElement) => void): () => void {
  listeners.add(fn);
  if (layout?.svg.isConnected) fn(layout.svg);
  return () => listeners.delete(fn);
}

// clip shortens text to fit px at about charW a character.
function clip(text: string, px: number, cw = charW): string {
  const n = Math.max(1, Math.floor(px / cw));
  return text.length <= n ? text : text.slice(0, Math.max(1, n - 1)) + "…";
}

function plural(n: number, one: string, many = one + "s"): string {
  return `${n.toLocaleString("en")} ${n === 1 ? one : many}`;
}

// FleetGraph is the fleet graph with its controls: the grouping, the
// filters and expand/collapse all. It keeps what the reader chose across
// live updates; update gives it new data and redraws.
export class FleetGraph {
  readonly el: HTMLElement;
  private readonly wrap: HTMLElement;
  private readonly summary: HTMLElement;
  private readonly groupBy: HTMLSelectElement;
  private readonly filters: Record<"cluster" | "namespace" | "destination", HTMLInputElement>;
  private status?: Status;
  private byCluster = new Map<string, GraphDestination[]>(); // in natural order
  private edges: GraphEdge[] = [];
  private loaded = false; // whether relations came
  private drawn = ""; // what of the status the drawing shows
  private grouping = ""; // the reader's choice; "" until one is made
  private toggled = new Map<string, boolean>(); // group key → expanded, as the reader set it
  private lastGroups: Group[] = [];
  private width = 0;
  private frame = 0;

  constructor(private readonly go: (r: string) => void) {
    this.groupBy = h("select", { id: "group-by", "aria-label": "group clusters by", onchange: () => this.choose() }) as HTMLSelectElement;
    const input = (id: string, placeholder: string) =>
      h("input", { id, type: "search", placeholder, "aria-label": placeholder, autocomplete: "off", oninput: () => this.refilter() }) as HTMLInputElement;
    this.filters = {
      cluster: input("filter-cluster", "cluster"),
      namespace: input("filter-namespace", "namespace"),
      destination: input("filter-destination", "destination"),
    };
    const all = (expanded: boolean) => () => {
      for (const g of this.lastGroups) this.toggled.set(g.key, expanded);
      this.draw();
    };
    this.summary = h("span", { id: "graph-summary", class: "muted" });
    this.wrap = h("div", { class: "graph-wrap" });
    this.el = h(
      "div",
      { class: "fleet-graph" },
      h(
        "div",
        { class: "graph-controls" },
        h("label", {}, "group by ", this.groupBy),
        h("label", {}, "filter ", this.filters.cluster, this.filters.namespace, this.filters.destination),
        h("button", { type: "button", id: "expand-all", onclick: all(true) }, "expand all"),
        h("button", { type: "button", id: "collapse-all", onclick: all(false) }, "collapse all"),
        this.summary,
      ),
      this.wrap,
    );
    new ResizeObserver(() => {
      const w = this.wrap.clientWidth;
      if (w > 0 && Math.abs(w - this.width) >= 1) this.draw();
    }).observe(this.wrap);
  }

  // update takes the fleet's status and, when given, new relations (their
  // destinations in natural order, as GET /api/graph sends them), and
  // redraws.
  update(st: Status, relations?: { destinations: GraphDestination[]; edges: GraphEdge[] }) {
    this.status = st;
    // A status whose news the graph does not draw (an input's version, a
    // heartbeat) leaves the drawing as it is.
    const key = st.clusters.map((c) => `${c.name}:${clusterState(c, st)}:${c.meshes.join("+")}:${JSON.stringify(c.labels ?? {})}:${c.outputs.some((o) => o.errors > 0)}`).join(";");
    if (!relations && key === this.drawn && this.wrap.firstChild) return;
    this.drawn = key;
    if (relations) {
      const by = new Map<string, GraphDestination[]>();
      for (const d of relations.destinations) {
        const list = by.get(d.cluster);
        if (list) list.push(d);
        else by.set(d.cluster, [d]);
      }
      this.byCluster = by;
      this.edges = relations.edges;
      this.loaded = true;
    }
    this.draw();
  }

  // dests counts destinations, once the relations came.
  private dests(n: number): string {
    return this.loaded ? plural(n, "destination") : "destinations loading…";
  }

  private choose() {
    this.grouping = this.groupBy.value;
    this.draw();
  }

  // refilter redraws after the filters changed: a new filter starts from
  // the groups it expands by itself.
  private refilter() {
    this.toggled.clear();
    this.schedule();
  }

  private schedule() {
    cancelAnimationFrame(this.frame);
    this.frame = requestAnimationFrame(() => this.draw());
  }

  // groupings returns the ways to group the clusters: their label keys,
  // by mesh, or none; and the default, region when a cluster has it.
  private groupings(clusters: ClusterStatus[]): { options: string[]; fallback: string } {
    const keys = new Set<string>();
    for (const c of clusters) for (const k of Object.keys(c.labels ?? {})) keys.add(k);
    const labels = [...keys].sort(natural).map((k) => "label:" + k);
    return { options: [...labels, "mesh", "none"], fallback: keys.has("region") ? "label:region" : "mesh" };
  }

  private syncGroupBy(options: string[], current: string) {
    const have = [...this.groupBy.options].map((o) => o.value);
    if (have.join("\n") !== options.join("\n")) {
      this.groupBy.replaceChildren(...options.map((o) => h("option", { value: o }, o.startsWith("label:") ? `label ${o.slice(6)}` : o === "none" ? "no grouping" : o)));
    }
    this.groupBy.value = current;
  }

  // groupKey returns a cluster's group and its title under a grouping.
  // The group of clusters without the label (or without a mesh) is "-",
  // which no label value can be.
  private groupKey(c: ClusterStatus, grouping: string): [string, string] {
    if (grouping.startsWith("label:")) {
      const k = grouping.slice(6);
      const v = c.labels?.[k];
      return v === undefined ? [none, `no ${k} label`] : [v, `${k}=${v}`];
    }
    if (grouping === "mesh") {
      const m = [...c.meshes].sort(natural).join("+");
      return m ? [m, `mesh ${m}`] : [none, "no mesh"];
    }
    return ["all", "all clusters"];
  }

  // shown returns a cluster's destinations that pass the filters.
  private shown(cluster: string, ns: string, dest: string): GraphDestination[] {
    const ds = this.byCluster.get(cluster) ?? [];
    if (!ns && !dest) return ds;
    return ds.filter((d) => (!ns || d.namespace.toLowerCase().includes(ns)) && (!dest || `${d.namespace}/${d.name}`.toLowerCase().includes(dest)));
  }

  // draw groups and filters the clusters, lays them out to the width and
  // replaces the drawing.
  draw() {
    const st = this.status;
    if (!st) return;
    const { options, fallback } = this.groupings(st.clusters);
    const grouping = options.includes(this.grouping) ? this.grouping : fallback;
    this.syncGroupBy(options, grouping);
    const fc = this.filters.cluster.value.trim().toLowerCase();
    const fn = this.filters.namespace.value.trim().toLowerCase();
    const fd = this.filters.destination.value.trim().toLowerCase();
    const filtering = !!(fc || fn || fd);

    const groups = new Map<string, Group>();
    const dests = new Map<string, GraphDestination[]>();
    let shownClusters = 0;
    let shownDests = 0;
    let totalDests = 0;
    for (const c of st.clusters) {
      const [key, title] = this.groupKey(c, grouping);
      let g = groups.get(key);
      if (!g) groups.set(key, (g = { key, title, clusters: [], total: 0, destinations: 0, states: new Map(), errors: 0, worst: "connected" }));
      g.total++;
      totalDests += this.byCluster.get(c.name)?.length ?? 0;
      if (fc && !c.name.toLowerCase().includes(fc)) continue;
      const ds = this.shown(c.name, fn, fd);
      if ((fn || fd) && ds.length === 0) continue;
      dests.set(c.name, ds);
      g.clusters.push(c);
      g.destinations += ds.length;
      const state = clusterState(c, st);
      g.states.set(state, (g.states.get(state) ?? 0) + 1);
      if (severity.indexOf(state) < severity.indexOf(g.worst)) g.worst = state;
      if (c.outputs.some((o) => o.errors > 0)) g.errors++;
      shownClusters++;
      shownDests += ds.length;
    }
    const ordered = [...groups.values()].filter((g) => g.clusters.length > 0 || !filtering).sort((a, b) => +(a.key === none) - +(b.key === none) || natural(a.key, b.key));
    for (const g of ordered) g.clusters.sort((a, b) => natural(a.name, b.name));
    this.lastGroups = ordered;
    const auto = filtering ? shownClusters <= smallFilter : st.clusters.length <= smallFleet;
    const expanded = (g: Group) => this.toggled.get(g.key) ?? auto;

    this.summary.textContent = `${plural(ordered.length, "group")} · ${plural(shownClusters, "cluster")}${filtering ? ` of ${st.clusters.length.toLocaleString("en")}` : ""} · ${this.dests(shownDests)}${filtering && this.loaded ? ` of ${totalDests.toLocaleString("en")}` : ""}`;
    this.width = this.wrap.clientWidth;
    const width = Math.max(groupW + 2 * pad, this.width || (document.getElementById("app")?.clientWidth ?? 1000) - 34);
    const root = this.render(st, ordered, dests, expanded, width);
    this.wrap.replaceChildren(root);
    for (const fn of listeners) fn(root);
  }

  private render(st: Status, groups: Group[], dests: Map<string, GraphDestination[]>, expanded: (g: Group) => boolean, width: number): SVGSVGElement {
    const next: Layout = { svg: undefined as unknown as SVGSVGElement, groupOf: new Map(), groups: new Map(), clusters: new Map(), rows: new Map() };
    const room = this.edges.length ? edgeRoom : 0;
    const nodes = svg("g", { class: "nodes" });
    let y = pad + room;
    // Collapsed groups flow in rows across the width; an expanded group
    // takes a band of the full width.
    const cols = Math.max(1, Math.floor((width - 2 * pad + gap) / (groupW + gap)));
    let col = 0;
    const endRow = () => {
      if (col > 0) y += groupH + gap + room;
      col = 0;
    };
    for (const g of groups) {
      for (const c of g.clusters) next.groupOf.set(c.name, g.key);
      if (!expanded(g)) {
        if (col === cols) endRow();
        const x = pad + col * (groupW + gap);
        nodes.append(this.groupNode(g, x, y));
        next.groups.set(g.key, { x: x + groupW / 2, y });
        col++;
        continue;
      }
      endRow();
      y = this.band(st, g, dests, nodes, next, y, width, room);
    }
    endRow();
    const height = Math.max(y - room + pad - gap, 60);

    const root = svg("svg", {
      class: "graph",
      viewBox: `0 0 ${width} ${height}`,
      width,
      height,
      role: "img",
      "aria-label": "fleet graph",
    }) as SVGSVGElement;
    root.append(
      svg(
        "defs",
        {},
        svg(
          "marker",
          { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
          svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }),
        ),
      ),
      nodes,
    );
    next.svg = root;
    layout = next;
    root.append(this.drawEdges(next, groups));
    return root;
  }

  // groupNode draws a collapsed group: its title, how many clusters and
  // destinations it holds, and their states.
  private groupNode(g: Group, x: number, y: number): SVGElement {
    const stale = (g.states.get("stale") ?? 0) + (g.states.get("safe-mode") ?? 0);
    const down = (g.states.get("disconnected") ?? 0) + (g.states.get("revoked") ?? 0);
    const states = severity
      .filter((s) => g.states.get(s))
      .reverse()
      .map((s) => `${g.states.get(s)!.toLocaleString("en")} ${s}`)
      .join(" · ");
    const toggle = () => {
      this.toggled.set(g.key, true);
      this.draw();
    };
    const node = svg(
      "g",
      {
        class: `group state-${g.worst}`,
        "data-group": g.key,
        "data-expanded": "false",
        "data-clusters": g.clusters.length,
        "data-destinations": this.loaded ? g.destinations : undefined,
        "data-stale": stale,
        "data-down": down,
        "data-errors": g.errors,
        "data-state": g.worst,
        onclick: toggle,
      },
      svg("rect", { x, y, width: groupW, height: groupH, rx: 12, class: "group-box" }),
      svg("text", { x: x + 14, y: y + 24, class: "group-name" }, clip(g.title, groupW - 44, 8.4)),
      svg("text", { x: x + groupW - 14, y: y + 24, class: "group-toggle", "text-anchor": "end" }, "+"),
      svg("text", { x: x + 14, y: y + 46 }, clip(`${plural(g.clusters.length, "cluster")}${g.clusters.length !== g.total ? ` of ${g.total.toLocaleString("en")}` : ""} · ${this.dests(g.destinations)}`, groupW - 28)),
      svg("text", { x: x + 14, y: y + 66, class: "group-states" }, clip(states || "no clusters", groupW - 28)),
      svg("text", { x: x + 14, y: y + 86, class: g.errors ? "group-errors error" : "group-errors muted" }, clip(g.errors ? `${plural(g.errors, "cluster")} with apply errors` : "no apply errors", groupW - 28)),
    );
    node.append(svg("title", {}, `${g.title}: ${states}; click to expand`));
    return node;
  }

  // band draws an expanded group across the width: its header, which
  // collapses it, and its clusters in rows. It returns the y below it.
  private band(st: Status, g: Group, dests: Map<string, GraphDestination[]>, nodes: SVGElement, next: Layout, top: number, width: number, room: number): number {
    const inner = width - 2 * pad - 2 * 12;
    const cols = Math.max(1, Math.floor((inner + gap) / (clusterMinW + gap)));
    const boxW = Math.floor((inner - (cols - 1) * gap) / cols);
    const shown = g.clusters.slice(0, maxClusters);
    const band = svg("g", { class: `group expanded state-${g.worst}`, "data-group": g.key, "data-expanded": "true", "data-clusters": g.clusters.length, "data-destinations": this.loaded ? g.destinations : undefined });
    const collapse = () => {
      this.toggled.set(g.key, false);
      this.draw();
    };
    const frame = svg("rect", { x: pad, y: top, width: width - 2 * pad, height: 0, rx: 12, class: "group-band" });
    band.append(
      frame,
      svg(
        "g",
        { class: "group-head", onclick: collapse },
        svg("rect", { x: pad, y: top, width: width - 2 * pad, height: bandHead - 6, rx: 12, class: "group-head-box" }),
        svg("text", { x: pad + 14, y: top + 23, class: "group-name" }, clip(`− ${g.title}`, (width - 2 * pad) / 2, 8.4)),
        svg("text", { x: width - pad - 14, y: top + 23, "text-anchor": "end", class: "muted" }, clip(`${plural(g.clusters.length, "cluster")} · ${this.dests(g.destinations)}`, (width - 2 * pad) / 2 - 28)),
      ),
    );
    let y = top + bandHead + room;
    for (let i = 0; i < shown.length; i += cols) {
      const row = shown.slice(i, i + cols);
      const heights = row.map((c) => headH + rowH * Math.min(dests.get(c.name)!.length, maxRows + 1) + 8);
      row.forEach((c, j) => {
        const x = pad + 12 + j * (boxW + gap);
        band.append(this.clusterBox(st, c, dests.get(c.name)!, x, y, boxW, heights[j], next));
      });
      y += Math.max(...heights) + gap + room;
    }
    if (g.clusters.length > shown.length) {
      band.append(svg("text", { x: pad + 14, y: y - room + 4, class: "more-clusters muted" }, `+${(g.clusters.length - shown.length).toLocaleString("en")} more clusters: filter by cluster to see them`));
      y += 24;
    }
    y = y - room - gap + 12;
    frame.setAttribute("height", String(y - top));
    nodes.append(band);
    return y + gap + room;
  }

  // clusterBox draws a cluster with its meshes and destinations.
  private clusterBox(st: Status, c: ClusterStatus, ds: GraphDestination[], x: number, y: number, w: number, boxH: number, next: Layout): SVGElement {
    const state = clusterState(c, st);
    const g = svg("g", { class: `cluster state-${state}`, "data-cluster": c.name, "data-state": state });
    const open = () => this.go(route("clusters", c.name));
    g.append(
      svg("rect", { x, y, width: w, height: boxH, rx: 10, class: "cluster-box", onclick: open }),
      svg("text", { x: x + 14, y: y + 24, class: "cluster-name", onclick: open }, clip(c.name, w - 110, 8.6)),
      svg("text", { x: x + w - 14, y: y + 24, class: "cluster-state", "text-anchor": "end" }, state),
    );
    next.clusters.set(c.name, { x: x + w / 2, y });
    let mx = x + 14;
    for (const m of c.meshes) {
      const mw = 12 + m.length * 7.5;
      if (mx + mw > x + w - 14) break;
      g.append(
        svg(
          "g",
          { class: "mesh", "data-mesh": m },
          svg("rect", { x: mx, y: y + 34, width: mw, height: 18, rx: 9 }),
          svg("text", { x: mx + mw / 2, y: y + 47, "text-anchor": "middle" }, m),
        ),
      );
      mx += mw + 6;
    }
    ds.slice(0, maxRows).forEach((d, i) => {
      const ry = y + headH + i * rowH;
      next.rows.set(`${c.name}/${d.namespace}/${d.name}`, { x, y: ry + 10 });
      const openDest = () => this.go(route("destinations", d.namespace, d.name));
      g.append(
        svg(
          "g",
          { class: "destination", "data-destination": `${d.cluster}/${d.namespace}/${d.name}`, onclick: openDest },
          svg("rect", { x: x + 14, y: ry, width: w - 28, height: 20, rx: 4 }),
          svg("text", { x: x + 22, y: ry + 14 }, clip(`${d.name}.${d.namespace}`, w - 44)),
        ),
      );
    });
    if (ds.length > maxRows) {
      g.append(svg("text", { x: x + 22, y: y + headH + maxRows * rowH + 14, class: "muted" }, `+${ds.length - maxRows} more`));
    }
    return g;
  }

  // drawEdges draws the policies' edges between what is shown: an edge
  // ends at its destination's row when drawn, else at its cluster's box,
  // else at the collapsed group holding it; edges of one policy between
  // the same two nodes are drawn once, with their count.
  private drawEdges(l: Layout, groups: Group[]): SVGElement {
    const layer = svg("g", { class: "edges" });
    const node = (cluster: string): [string, Anchor] | undefined => {
      const box = l.clusters.get(cluster);
      if (box) return [cluster, box];
      const g = l.groupOf.get(cluster);
      const a = g === undefined ? undefined : l.groups.get(g);
      return a && g !== undefined ? ["group:" + g, a] : undefined;
    };
    const titles = new Map(groups.map((g) => ["group:" + g.key, g.title]));
    interface Drawn {
      from: string;
      to: string;
      a: Anchor;
      b: Anchor;
      row: boolean;
      e: GraphEdge;
      count: number;
    }
    const drawn = new Map<string, Drawn>();
    for (const e of this.edges) {
      if (e.from === e.to) continue;
      const src = node(e.from);
      const dst = node(e.to);
      if (!src || !dst || src[0] === dst[0]) continue;
      let b = dst[1];
      let row = false;
      if (e.destination && l.clusters.has(e.to)) {
        const r = l.rows.get(`${e.to}/${e.destination}`);
        if (r) [b, row] = [r, true];
      }
      const key = `${src[0]}>${dst[0]}>${row ? e.destination : ""}>${e.policy}`;
      const d = drawn.get(key);
      if (d) d.count++;
      else drawn.set(key, { from: src[0], to: dst[0], a: src[1], b, row, e, count: 1 });
    }
    const pairs = new Map<string, number>();
    for (const d of drawn.values()) {
      const pair = `${d.from}>${d.to}`;
      const n = pairs.get(pair) ?? 0;
      pairs.set(pair, n + 1);
      const x1 = d.a.x + (n % 5) * 12 - 24;
      const y1 = d.a.y;
      let x2 = d.b.x + (d.row ? 0 : (n % 5) * 12 - 24);
      if (d.row) {
        // A row is entered from the side facing the source.
        const boxW = 2 * (l.clusters.get(d.e.to)!.x - d.b.x);
        if (x1 > d.b.x + boxW) x2 = d.b.x + boxW;
      }
      const y2 = d.b.y;
      const lift = Math.min(edgeRoom - 8, 16 + Math.abs(x2 - x1) / 24) + (n % 3) * 6;
      const top = Math.min(y1, y2) - lift;
      const apex = 0.125 * (y1 + y2) + 0.75 * top;
      const label = d.e.policy.split("/")[2] ?? d.e.policy;
      const open = () => this.go(route("policies", ...d.e.policy.split("/")));
      const g = svg(
        "g",
        { class: `edge kind-${d.e.kind}`, "data-edge": `${d.from}>${d.to}`, "data-policy": d.e.policy, "data-kind": d.e.kind, "data-count": d.count, onclick: open },
        svg("path", { d: `M ${x1} ${y1} C ${x1} ${top}, ${x2} ${top}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }),
        svg("text", { x: (x1 + x2) / 2, y: apex - 4, "text-anchor": "middle" }, d.count > 1 ? `${label} ×${d.count}` : label),
      );
      const name = (n: string) => titles.get(n) ?? n;
      g.append(svg("title", {}, `${d.e.kind} ${d.e.policy}: ${name(d.from)} → ${name(d.to)}${d.row ? " " + d.e.destination : ""}${d.count > 1 ? ` (${d.count} edges)` : ""}`));
      layer.append(g);
    }
    return layer;
  }
}
