// The fleet graph: clusters (coloured by state) holding their meshes and
// destinations, and the cross-cluster edges policies create.
import { clusterState, type Status } from "./api";
import { route, svg } from "./dom";

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

// Anchor is where the graph drew a cluster's box or a destination's row,
// in the graph's coordinates.
export interface Anchor {
  x: number;
  y: number;
  width: number;
  height: number;
}

// anchors maps each cluster's name, and "cluster/namespace/name" of each
// destination row, to where the last fleetGraph drew it: the seam through
// which overlays (traffic.ts) find the graph's nodes.
export const anchors = new Map<string, Anchor>();

const boxW = 300;
const gapX = 60;
const headH = 58;
const rowH = 26;
const maxDestinations = 14;
const arcRoom = 120;

interface Box {
  x: number;
  y: number;
  h: number;
  rows: Map<string, number>;
}

export function fleetGraph(st: Status, dests: GraphDestination[], edges: GraphEdge[], go: (r: string) => void): SVGElement {
  const clusters = [...st.clusters].sort((a, b) => a.name.localeCompare(b.name));
  const byCluster = new Map<string, GraphDestination[]>();
  for (const d of dests) {
    const list = byCluster.get(d.cluster) ?? [];
    list.push(d);
    byCluster.set(d.cluster, list);
  }
  const cols = Math.max(1, Math.min(clusters.length, 4));
  const heights = clusters.map((c) => headH + rowH * Math.min((byCluster.get(c.name) ?? []).length, maxDestinations + 1) + 12);
  const rowHeight = Math.max(140, ...heights);
  const boxes = new Map<string, Box>();
  anchors.clear();
  clusters.forEach((c, i) => {
    const x = 20 + (i % cols) * (boxW + gapX);
    const y = arcRoom + Math.floor(i / cols) * (rowHeight + arcRoom);
    boxes.set(c.name, { x, y, h: heights[i], rows: new Map() });
    anchors.set(c.name, { x, y, width: boxW, height: heights[i] });
  });
  const width = 40 + cols * boxW + (cols - 1) * gapX;
  const rows = Math.ceil(clusters.length / cols);
  const height = rows * (rowHeight + arcRoom) + 20;

  const root = svg("svg", {
    class: "graph",
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: "img",
    "aria-label": "fleet graph",
  });
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
  );
  for (const c of clusters) {
    const b = boxes.get(c.name)!;
    const state = clusterState(c, st);
    const g = svg("g", { class: `cluster state-${state}`, "data-cluster": c.name, "data-state": state });
    const open = () => go(route("clusters", c.name));
    g.append(
      svg("rect", { x: b.x, y: b.y, width: boxW, height: b.h, rx: 10, class: "cluster-box", onclick: open }),
      svg("text", { x: b.x + 14, y: b.y + 24, class: "cluster-name", onclick: open }, c.name),
      svg("text", { x: b.x + boxW - 14, y: b.y + 24, class: "cluster-state", "text-anchor": "end" }, state),
    );
    let mx = b.x + 14;
    for (const m of c.meshes) {
      const w = 12 + m.length * 7.5;
      g.append(
        svg(
          "g",
          { class: "mesh", "data-mesh": m },
          svg("rect", { x: mx, y: b.y + 34, width: w, height: 18, rx: 9 }),
          svg("text", { x: mx + w / 2, y: b.y + 47, "text-anchor": "middle" }, m),
        ),
      );
      mx += w + 6;
    }
    const ds = (byCluster.get(c.name) ?? []).sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
    ds.slice(0, maxDestinations).forEach((d, i) => {
      const y = b.y + headH + i * rowH;
      b.rows.set(`${d.namespace}/${d.name}`, y + 10);
      anchors.set(`${d.cluster}/${d.namespace}/${d.name}`, { x: b.x + 14, y, width: boxW - 28, height: 20 });
      const openDest = () => go(route("destinations", d.namespace, d.name));
      g.append(
        svg(
          "g",
          { class: "destination", "data-destination": `${d.cluster}/${d.namespace}/${d.name}`, onclick: openDest },
          svg("rect", { x: b.x + 14, y, width: boxW - 28, height: 20, rx: 4 }),
          svg("text", { x: b.x + 22, y: y + 14 }, `${d.name}.${d.namespace}`),
        ),
      );
    });
    if (ds.length > maxDestinations) {
      g.append(svg("text", { x: b.x + 22, y: b.y + headH + maxDestinations * rowH + 14, class: "muted" }, `+${ds.length - maxDestinations} more`));
    }
    root.append(g);
  }
  drawEdges(root, boxes, edges, go);
  return root;
}

// drawEdges draws each edge as an arc above the boxes, from the client
// cluster's top to the destination's row (or its cluster's top).
function drawEdges(root: SVGElement, boxes: Map<string, Box>, edges: GraphEdge[], go: (r: string) => void) {
  const seen = new Map<string, number>();
  for (const e of edges) {
    const from = boxes.get(e.from);
    const to = boxes.get(e.to);
    if (!from || !to || e.from === e.to) continue;
    const pair = `${e.from}>${e.to}`;
    const n = seen.get(pair) ?? 0;
    seen.set(pair, n + 1);
    const x1 = from.x + boxW / 2 + (n % 5) * 12 - 24;
    const y1 = from.y;
    const rowY = e.destination ? to.rows.get(e.destination) : undefined;
    const x2 = rowY !== undefined ? (to.x > from.x ? to.x : to.x + boxW) : to.x + boxW / 2 + (n % 5) * 12 - 24;
    const y2 = rowY ?? to.y;
    const lift = Math.min(arcRoom - 60, 24 + Math.abs(x2 - x1) / 16) + (n % 3) * 26;
    const top = Math.min(y1, y2) - lift;
    const apex = 0.125 * (y1 + y2) + 0.75 * top;
    const d = `M ${x1} ${y1} C ${x1} ${top}, ${x2} ${top}, ${x2} ${y2}`;
    const cls = `edge kind-${e.kind}`;
    const open = () => go(route("policies", ...e.policy.split("/")));
    const g = svg(
      "g",
      { class: cls, "data-edge": `${e.from}>${e.to}`, "data-policy": e.policy, "data-kind": e.kind, onclick: open },
      svg("path", { d, "marker-end": "url(#arrow)" }),
      svg("text", { x: (x1 + x2) / 2, y: apex - 4, "text-anchor": "middle" }, e.policy.split("/").pop() ?? ""),
    );
    g.append(svg("title", {}, `${e.kind} ${e.policy}: ${e.from} → ${e.to}${e.destination ? " " + e.destination : ""}`));
    root.append(g);
  }
}
