// Live traffic: workload → destination edges drawn over the fleet graph
// (positions from graph.ts's nodeAnchor, redrawn after each of its
// layouts through onLayout), a destination's callers, and the
// error rate around a policy's last change. Each polls the UI's
// /api/traffic while it is on the page.
import { getJSON } from "./api";
import { h, link, route, section, svg, table } from "./dom";
import { nodeAnchor, onLayout, type Anchor } from "./graph";

// TrafficEdge is an edge of the Traffic API (proto/relay/v1/traffic.proto);
// uint64 counts arrive as strings.
export interface TrafficEdge {
  sourceCluster: string;
  sourceWorkload: string;
  destinationCluster: string;
  destinationService: string;
  protocol: string;
  requests: string;
  errors: string;
  rps: number;
  errorRate: number;
  p50Ms: number;
  p99Ms: number;
}

interface Edges {
  edges: TrafficEdge[];
  serverId: string;
  // missing names the live server replicas whose edges the answer lacks.
  missing?: string[];
}

// missingNote says which server replicas' traffic an answer lacks, and why.
function missingNote(missing?: string[]): HTMLElement[] {
  return (missing ?? []).map((m) => h("p", { class: "warning missing-replica" }, `Lacks the traffic of server replica ${m}`));
}

interface DestinationTraffic {
  namespace: string;
  name: string;
  beforeRequests: string;
  beforeErrors: string;
  afterRequests: string;
  afterErrors: string;
  nowRequests: string;
  nowErrors: string;
}

interface PolicyTraffic {
  changedAt?: string | null;
  minutes: number;
  destinations: DestinationTraffic[];
  missing?: string[];
}

const every = 3000;

// joinWithin bounds how long poll waits for an element to join the page:
// one made for a render that a newer render replaced never joins.
const joinWithin = 30000;

// poll calls f now and every few seconds while el is in the page, then
// calls stopped. The element joins the page after its page's own fetches
// (a policy's description), which may come after f's first answer: until
// it has joined, poll keeps calling f, for at most joinWithin.
function poll(el: Element, f: () => Promise<void>, stopped?: () => void) {
  const made = Date.now();
  let joined = false;
  const tick = async () => {
    try {
      await f();
    } catch {
      // The next tick tries again; the page shows what it last had.
    }
    joined ||= el.isConnected;
    if (el.isConnected || (!joined && Date.now() - made < joinWithin)) window.setTimeout(tick, every);
    else stopped?.();
  };
  window.setTimeout(tick, 0);
}

// errorClass colours an edge by its error rate.
export function errorClass(rate: number): string {
  return rate >= 0.05 ? "err-high" : rate >= 0.01 ? "err-some" : "err-none";
}

function pct(rate: number): string {
  return `${(100 * rate).toFixed(1)}%`;
}

function ms(v: number): string {
  return v ? `${v.toFixed(v < 10 ? 1 : 0)}ms` : "-";
}

// sourceAnchor finds where a workload sits: the row of the destination
// its name serves in its cluster ("productpage-v1" → productpage), else
// its cluster's box, else the collapsed group holding it.
function sourceAnchor(e: TrafficEdge): Anchor | undefined {
  const [ns, name] = e.sourceWorkload.includes("/") ? e.sourceWorkload.split("/", 2) : ["", e.sourceWorkload];
  const app = name.replace(/-v\d+$/, "");
  return nodeAnchor(e.sourceCluster, ns, app);
}

// The overlay's state: the edges last fetched, the graph last laid out,
// and whether the edges are being polled.
let shownEdges: TrafficEdge[] = [];
let laidOut: SVGSVGElement | undefined;
let polling = false;
let following = false;

// overlayTraffic draws the live edges over the fleet graph while el (the
// fleet page) is in the page: it polls /api/traffic and redraws the edges
// after every layout of the graph. Calling it again while it runs does
// nothing.
export function overlayTraffic(el: Element) {
  if (!following) {
    following = true;
    onLayout((g) => {
      laidOut = g;
      drawTraffic(g, shownEdges);
    });
  }
  if (polling) return;
  polling = true;
  poll(
    el,
    async () => {
      const r = await getJSON<Edges>("/api/traffic");
      shownEdges = r.edges;
      if (laidOut?.isConnected) drawTraffic(laidOut, shownEdges);
      let note = el.querySelector<HTMLElement>("div.traffic-missing");
      if (!note) {
        note = h("div", { class: "traffic-missing" });
        el.prepend(note);
      }
      note.replaceChildren(...missingNote(r.missing));
    },
    () => {
      polling = false;
    },
  );
}

function drawTraffic(graph: SVGSVGElement, edges: TrafficEdge[]) {
  let layer = graph.querySelector<SVGGElement>("g#traffic");
  if (!layer) {
    layer = svg("g", { class: "traffic", id: "traffic" }) as SVGGElement;
    graph.append(layer);
  }
  const parts: SVGElement[] = [];
  const seen = new Map<string, number>();
  for (const e of edges) {
    const [dns, dname] = e.destinationService.split("/", 2);
    const to = nodeAnchor(e.destinationCluster, dns, dname);
    const from = sourceAnchor(e);
    if (!to || !from) continue;
    const n = seen.get(e.destinationCluster + e.destinationService) ?? 0;
    seen.set(e.destinationCluster + e.destinationService, n + 1);
    const x2 = to.x;
    const y2 = to.y + n * 3;
    const x1 = from.x;
    const y1 = from.y;
    const sameBox = Math.abs(x1 - x2) < 1;
    const bulge = 40 + 14 * n;
    const d = sameBox
      ? `M ${x1} ${y1} C ${x1 - bulge} ${y1}, ${x2 - bulge} ${y2}, ${x2} ${y2}`
      : `M ${x1} ${y1} C ${x1 + bulge} ${y1 - 60}, ${x2 - bulge} ${y2 - 60}, ${x2} ${y2}`;
    const label = `${e.rps.toFixed(1)} rps · ${pct(e.errorRate)} · p99 ${ms(e.p99Ms)}`;
    const width = Math.min(6, 1.5 + Math.log10(1 + e.rps) * 2);
    const lx = sameBox ? Math.min(x1, x2) - bulge * 0.75 - 4 : (x1 + x2) / 2;
    const ly = sameBox ? (y1 + y2) / 2 + 4 : (y1 + y2) / 2 - 45;
    const g = svg(
      "g",
      {
        class: `traffic-edge ${errorClass(e.errorRate)}`,
        "data-traffic-edge": `${e.sourceCluster}/${e.sourceWorkload}>${e.destinationCluster}/${e.destinationService}`,
        "data-requests": e.requests,
        "data-error-rate": e.errorRate.toFixed(4),
        "data-rps": e.rps.toFixed(2),
        "data-p99": e.p99Ms.toFixed(1),
      },
      svg("path", { d, "stroke-width": width, "marker-end": "url(#arrow)" }),
      svg("text", { x: lx, y: ly }, label),
    );
    g.append(svg("title", {}, `${e.sourceWorkload} (${e.sourceCluster}) → ${e.destinationService} (${e.destinationCluster}), ${e.protocol}: ${label}, ${e.requests} requests in the last minute`));
    parts.push(g);
  }
  layer.replaceChildren(...parts);
}

// callersSection lists a destination's callers over the last minute, live.
export function callersSection(namespace: string, name: string): HTMLElement {
  const body = h("div", {}, h("p", { class: "muted" }, "loading…"));
  const el = section("Callers (last minute)", body);
  poll(el, async () => {
    const r = await getJSON<Edges>(`/api/traffic?destination=${encodeURIComponent(`${namespace}/${name}`)}`);
    const edges = [...r.edges].sort((a, b) => b.rps - a.rps);
    body.replaceChildren(
      table(
        ["caller", "cluster", "to cluster", "protocol", "rps", "error rate", "p50", "p99", "requests"],
        edges.map((e) =>
          h(
            "tr",
            {
              "data-caller": `${e.sourceCluster}/${e.sourceWorkload}>${e.destinationCluster}`,
              "data-requests": e.requests,
              "data-error-rate": e.errorRate.toFixed(4),
            },
            h("td", {}, e.sourceWorkload),
            h("td", {}, link(route("clusters", e.sourceCluster), e.sourceCluster)),
            h("td", {}, e.destinationCluster),
            h("td", {}, e.protocol),
            h("td", {}, e.rps.toFixed(2)),
            h("td", { class: errorClass(e.errorRate) }, pct(e.errorRate)),
            h("td", {}, ms(e.p50Ms)),
            h("td", {}, ms(e.p99Ms)),
            h("td", {}, e.requests),
          ),
        ),
        { id: "callers" },
      ),
      h("p", { class: "muted" }, `As server replicas ${r.serverId.split(",").join(", ")} heard from the agents connected to them.`),
      ...missingNote(r.missing),
    );
  });
  return el;
}

function rate(req: string, err: string): string {
  const r = Number(req);
  return r ? `${pct(Number(err) / r)} of ${r}` : "-";
}

// policyTrafficSection shows, for the destinations a policy selects, the
// error rate before and after its last change.
export function policyTrafficSection(kind: string, namespace: string, name: string, source?: string): HTMLElement {
  const body = h("div", {}, h("p", { class: "muted" }, "loading…"));
  const el = section("Traffic around the last change", body);
  pollPolicyTraffic(el, body, kind, namespace, name, source, "policy-traffic");
  return el;
}

// policyTraffic is policyTrafficSection's table alone, for the pages that
// show several policies' (the rollout's), each headed by its policy and
// kept live while it is in the page.
export function policyTraffic(kind: string, namespace: string, name: string, source?: string): HTMLElement {
  const body = h("div", {}, h("p", { class: "muted" }, "loading…"));
  const el = h(
    "div",
    { class: "policy-traffic", "data-policy": `${kind}/${namespace}/${name}` },
    h("h3", {}, link(route(...["policies", kind, namespace, name, ...(source ? [source] : [])]), `${kind} ${namespace}/${name}`)),
    body,
  );
  pollPolicyTraffic(el, body, kind, namespace, name, source);
  return el;
}

function pollPolicyTraffic(el: HTMLElement, body: HTMLElement, kind: string, namespace: string, name: string, source?: string, id?: string) {
  const q = source ? `?cluster=${encodeURIComponent(source)}` : "";
  poll(el, async () => {
    const r = await getJSON<PolicyTraffic>(`/api/traffic/policies/${[kind, namespace, name].map(encodeURIComponent).join("/")}${q}`);
    const when = r.changedAt
      ? `Changed at ${new Date(r.changedAt).toLocaleTimeString()}; ${r.minutes} minutes before and after.`
      : "No change seen since this server replica started; now is the last minutes.";
    body.replaceChildren(
      h("p", { class: "muted changed", id: id ? "policy-changed" : undefined, "data-changed": r.changedAt ?? "" }, when),
      table(
        ["destination", "before", "after", "now"],
        r.destinations.map((d) =>
          h(
            "tr",
            { "data-destination": `${d.namespace}/${d.name}`, "data-before": `${d.beforeErrors}/${d.beforeRequests}`, "data-after": `${d.afterErrors}/${d.afterRequests}` },
            h("td", {}, link(route("destinations", d.namespace, d.name), `${d.namespace}/${d.name}`)),
            h("td", {}, rate(d.beforeRequests, d.beforeErrors)),
            h("td", {}, rate(d.afterRequests, d.afterErrors)),
            h("td", {}, rate(d.nowRequests, d.nowErrors)),
          ),
        ),
        id ? { id } : { class: "traffic-change" },
      ),
      ...missingNote(r.missing),
    );
  });
}
