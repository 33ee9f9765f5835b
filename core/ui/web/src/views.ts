// The UI's pages, one per route. The destination, policy and cluster pages
// show what `meshrelay describe` prints.
import {
  clusterState,
  getJSON,
  getText,
  policyKey,
  type ClusterDescription,
  type DestinationDescription,
  type Diagnostic,
  type OutputResource,
  type PolicyDescription,
  type PolicyStatus,
  type Status,
} from "./api";
import { ago, h, link, route, section, table } from "./dom";
import { FleetGraph, natural } from "./graph";
import { fleetRelations } from "./relations";
import { RolloutPage } from "./rollout";
import { callersSection, overlayTraffic, policyTrafficSection } from "./traffic";

export interface Context {
  status: Status;
  args: string[];
  go: (route: string) => void;
}

export type View = (ctx: Context) => Promise<HTMLElement>;

// A Page draws from its own fetches alone, never from the status: on a
// first load it is drawn beside the status fetch, not after it.
export type Page = (ctx: Omit<Context, "status">) => Promise<HTMLElement>;

function policyRoute(p: PolicyStatus): string {
  const parts = ["policies", p.kind, p.namespace, p.name];
  return route(...(p.sourceCluster ? [...parts, p.sourceCluster] : parts));
}

function policyRows(ps: PolicyStatus[]): HTMLElement[] {
  return ps.map((p) => {
    const notes = [...p.errors.map((e) => h("li", { class: "error" }, e)), ...p.warnings.map((w) => h("li", { class: "warning" }, w))];
    if (p.rollout) notes.push(h("li", { class: "rollout" }, link("/rollout", p.rollout)));
    return h(
      "tr",
      { "data-policy": policyKey(p), "data-state": p.state },
      h("td", {}, p.kind),
      h("td", {}, link(policyRoute(p), `${p.namespace}/${p.name}`)),
      h("td", {}, p.sourceCluster || "management"),
      h("td", {}, h("span", { class: `badge state-${p.state}` }, p.state)),
      h("td", { class: "applied", "data-applied": `${p.appliedClusters}/${p.targetClusters}` }, `${p.appliedClusters}/${p.targetClusters}`),
      h("td", {}, notes.length ? h("ul", { class: "notes" }, notes) : "-"),
    );
  });
}

function policiesTable(ps: PolicyStatus[], id?: string): HTMLElement {
  return table(["kind", "policy", "source", "state", "applied", "diagnostics"], policyRows(ps), id ? { id } : {});
}

function diagnostics(ds: Diagnostic[]): HTMLElement {
  return section(
    "Diagnostics",
    table(
      ["severity", "policy", "cluster", "plugin", "path", "summary"],
      ds.map((d) =>
        h(
          "tr",
          { class: d.severity === "Error" ? "error" : "warning" },
          h("td", {}, d.severity),
          h("td", {}, d.policy),
          h("td", {}, d.cluster || "-"),
          h("td", {}, d.plugin || "-"),
          h("td", { class: "mono" }, d.path || "-"),
          h("td", {}, d.summary, d.detail ? h("div", { class: "muted" }, d.detail) : null),
        ),
      ),
      { class: "diagnostics" },
    ),
  );
}

function pretty(body: string): string {
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body;
  }
}

// lazyBody is an output's name that opens on its body, drawn when opened:
// a large fleet's pages list thousands of outputs.
function lazyBody(key: string, name: string, body: string): HTMLElement {
  const d = h("details", { "data-key": key }, h("summary", {}, name));
  d.addEventListener("toggle", () => {
    if ((d as HTMLDetailsElement).open && !d.querySelector("pre")) d.append(h("pre", { class: "yaml" }, pretty(body)));
  });
  return d;
}

function outputsTable(os: OutputResource[], withPolicies: boolean): HTMLElement {
  const head = ["cluster", "backend", "kind", "object", "state"];
  if (withPolicies) head.push("policies");
  return table(
    head,
    os.map((o) => {
      const state = o.error ? `failed: ${o.error}` : o.applied ? "applied" : "pending";
      const name = o.namespace ? `${o.namespace}/${o.name}` : o.name;
      return h(
        "tr",
        { "data-output": `${o.cluster}/${o.backend}/${o.kind}/${name}` },
        h("td", {}, link(route("clusters", o.cluster), o.cluster)),
        h("td", {}, link(route("clusters", o.cluster, "outputs", o.backend), o.backend)),
        h("td", {}, o.kind),
        h("td", {}, o.body ? lazyBody(`${o.cluster}/${o.backend}/${o.kind}/${name}`, name, o.body) : name),
        h("td", { class: o.error ? "error" : o.applied ? "ok" : "warning" }, state),
        withPolicies ? h("td", {}, o.policies.join(", ")) : null,
      );
    }),
    { class: "outputs" },
  );
}

function banner(st: Status): HTMLElement | null {
  const parts: HTMLElement[] = [];
  if (st.safeMode) parts.push(h("p", { class: "banner safe" }, `Safe mode: nothing is pruned until ${st.waitingFor.join(", ") || "the window ends"} report.`));
  if (st.store !== "ok") parts.push(h("p", { class: "banner degraded" }, `Store ${st.store}`));
  // The policies a rollout carries name it: one of them says where it is.
  const carried = st.policies.find((p) => p.rollout && !p.sourceCluster);
  if (carried) parts.push(h("p", { class: "banner rollout", id: "rollout-banner" }, "Staged ", link("/rollout", carried.rollout!)));
  return parts.length ? h("div", {}, parts) : null;
}

// relationsKey is what the graph's relations depend on: the clusters'
// inputs and labels, and the policies.
function relationsKey(st: Status): string {
  const cs = st.clusters.map((c) => `${c.name}:${c.inputHash}:${Object.entries(c.labels ?? {}).sort().join(",")}`);
  const ps = st.policies.map((p) => `${policyKey(p)}@${p.sourceCluster}:${p.state}:${p.appliedClusters}`);
  return cs.join(";") + "|" + ps.join(";");
}

// relationsRefresh bounds how often live updates fetch the graph's
// relations again: a large fleet's are megabytes, and the server computes
// them at most every 5 s (core/ui/graph.go, graphMaxAge).
const relationsRefresh = 5000;

// FleetPage is the fleet page, kept across live updates so that the
// graph's grouping, filters, expanded groups and the reader's focus stay.
class FleetPage {
  readonly root: HTMLElement;
  private readonly graph: FleetGraph;
  private readonly banner = h("div", {});
  private readonly title = h("h2", {});
  private readonly policies = h("div", {});
  private readonly plugins = h("div", {});
  private status?: Status;
  private key = "";
  private fetching = false;
  private fetchedAt = 0;

  constructor(go: (r: string) => void) {
    this.graph = new FleetGraph(go);
    const legend = h(
      "p",
      { class: "legend" },
      ["connected", "stale", "safe-mode", "disconnected"].map((s) => h("span", { class: `swatch state-${s}` }, s)),
      h("span", { class: "swatch edge-VirtualDestination" }, "VirtualDestination"),
      h("span", { class: "swatch edge-AccessPolicy" }, "AccessPolicy"),
    );
    this.root = h(
      "div",
      { id: "fleet" },
      this.banner,
      h("section", {}, this.title, legend, this.graph.el),
      section("Policies", this.policies),
      section("Plugins", this.plugins),
    );
  }

  // update shows st at once, with the relations the graph has; newer ones
  // (or the first) are fetched meanwhile.
  update(st: Status) {
    this.status = st;
    if (relationsKey(st) !== this.key) this.refresh();
    this.banner.replaceChildren(banner(st) ?? "");
    this.title.textContent = `Fleet — ${st.clusters.length.toLocaleString("en")} clusters, server ${st.serverId}`;
    this.policies.replaceChildren(policiesTable(st.policies, "policies"));
    this.plugins.replaceChildren(
      table(
        ["plugin", "backends", "health"],
        st.plugins.map((p) =>
          h(
            "tr",
            { "data-plugin": p.name },
            h("td", {}, p.name),
            h("td", {}, p.backends.join(", ")),
            h("td", { class: p.healthy ? "ok" : "error" }, p.healthy ? "healthy" : `failing: ${p.error}`),
          ),
        ),
      ),
    );
    this.graph.update(st);
    overlayTraffic(this.root);
  }

  // refresh fetches the relations again, one fetch at a time and at most
  // once per relationsRefresh, then redraws with the latest status. A
  // graph the server is computing again comes marked stale: it is asked
  // for again.
  private async refresh() {
    if (this.fetching) return;
    this.fetching = true;
    try {
      const wait = this.fetchedAt + relationsRefresh - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const key = relationsKey(this.status!);
      const rel = await fleetRelations();
      this.key = rel.stale ? "" : key;
      this.fetchedAt = Date.now();
      this.graph.update(this.status!, rel);
    } catch {
      this.fetchedAt = Date.now(); // the next status retries, after the wait
    } finally {
      this.fetching = false;
    }
    if (document.body.contains(this.root) && relationsKey(this.status!) !== this.key) this.refresh();
  }
}

let fleetPage: FleetPage | undefined;

const fleet: View = async ({ status: st, go }) => {
  fleetPage ??= new FleetPage(go);
  fleetPage.update(st);
  return fleetPage.root;
};

// labelChips shows a cluster's registry labels, sorted by key; "-" for none.
function labelChips(labels: Record<string, string> | undefined) {
  const keys = Object.keys(labels ?? {}).sort();
  if (keys.length === 0) return ["-"];
  return keys.map((k) => h("span", { class: "label", "data-label": k }, `${k}=${labels![k]}`));
}

const cluster: View = async ({ status: st, args }) => {
  const [name, sub, backend] = args;
  if (sub === "outputs" && backend) return outputs(name, backend);
  const d = await getJSON<ClusterDescription>(`/api/clusters/${encodeURIComponent(name)}`);
  const c = st.clusters.find((c) => c.name === name) ?? d.status;
  const state = clusterState(c, st);
  return h(
    "div",
    { id: "cluster", "data-cluster": name, "data-state": state },
    h("h1", {}, `Cluster ${name} `, h("span", { class: `badge state-${state}` }, state)),
    h(
      "dl",
      {},
      h("dt", {}, "connected"),
      h("dd", {}, c.connected ? `yes (replica ${c.replica || "-"})` : "no"),
      h("dt", {}, "last seen"),
      h("dd", {}, ago(c.lastSeen)),
      h("dt", {}, "input"),
      h("dd", {}, `version ${c.inputVersion}, ${c.inputResources} resources, hash ${c.inputHash || "-"}, updated ${ago(c.inputUpdated)}`),
      h("dt", {}, "workloads"),
      h("dd", {}, d.workloads),
      h("dt", {}, "destinations"),
      h("dd", {}, d.destinations),
      h("dt", {}, "registered"),
      h("dd", {}, ago(c.registered)),
      h("dt", {}, "labels"),
      h("dd", { id: "labels" }, ...labelChips(c.labels)),
    ),
    section(
      "Meshes",
      table(
        ["mesh", "namespace", "version", "trust domain", "network", "workloads"],
        d.meshes.map((m) =>
          h(
            "tr",
            { "data-mesh": m.name },
            h("td", {}, m.type, m.envoyNodes.length ? h("div", { class: "muted" }, `nodes: ${m.envoyNodes.join(", ")}`) : null),
            h("td", {}, m.namespace || "-"),
            h("td", {}, m.version || "-"),
            h("td", {}, m.trustDomain || "-"),
            h("td", {}, m.network || "-"),
            h("td", {}, m.workloads),
          ),
        ),
      ),
    ),
    section(
      "Outputs",
      table(
        ["backend", "resources", "hash", "applied", "apply errors"],
        c.outputs.map((o) =>
          h(
            "tr",
            { "data-backend": o.backend },
            h("td", {}, link(route("clusters", name, "outputs", o.backend), o.backend)),
            h("td", {}, o.resources),
            h("td", { class: "mono" }, o.hash),
            h("td", { class: o.applied ? "ok" : "warning" }, o.applied ? "yes" : "pending"),
            h("td", { class: o.errors ? "error" : "" }, o.errors),
          ),
        ),
        { id: "outputs" },
      ),
    ),
    section("Policies reaching it", policiesTable(d.policies)),
    diagnostics(d.diagnostics),
  );
};

async function outputs(name: string, backend: string): Promise<HTMLElement> {
  const yaml = await getText(`/api/clusters/${encodeURIComponent(name)}/outputs/${encodeURIComponent(backend)}`);
  return h(
    "div",
    { id: "output", "data-cluster": name, "data-backend": backend },
    h("h1", {}, link(route("clusters", name), name), ` — ${backend} outputs`),
    h("pre", { class: "yaml" }, yaml),
  );
}

// pageRows bounds the rows a policy page's tables draw at first; "show
// more" draws as many again.
const pageRows = 100;

// policyRefresh bounds how often live updates fetch a policy's description
// again: a fleet-wide policy's takes the server seconds at a thousand
// clusters.
const policyRefresh = 2000;

// PolicyPage is a policy's page, kept across live updates so that its
// filter and what the reader opened stay. At a thousand clusters its
// tables are filtered by cluster and state and drawn a page at a time,
// and an output's body is drawn when it is opened.
class PolicyPage {
  readonly root = h("div", { id: "policy" });
  private readonly clusterFilter = h("input", { id: "policy-filter", type: "search", placeholder: "cluster", "aria-label": "filter by cluster", autocomplete: "off", oninput: () => this.refilter() }) as HTMLInputElement;
  private readonly stateFilter = h(
    "select",
    { id: "policy-state", "aria-label": "filter by state", onchange: () => this.draw() },
    ["all", "applied", "pending", "failed"].map((s) => h("option", { value: s }, s === "all" ? "any state" : s)),
  ) as HTMLSelectElement;
  private readonly head = h("div", {});
  private readonly clusters = h("div", {});
  private readonly outputs = h("div", {});
  private readonly rest = h("div", {});
  private d?: PolicyDescription;
  private limits = { clusters: pageRows, outputs: pageRows };
  private fetching = false;
  private again = false;
  // first is the first description's fetch, which every render of the
  // page waits for until it is in.
  private first?: Promise<void>;
  private fetchedAt = 0;
  private timer = 0;
  // shown says the page was in the document at some time: one that was,
  // and is no more, was left.
  private shown = false;

  get loaded(): boolean {
    return this.d !== undefined;
  }

  // left says the reader went to another page after this one was shown.
  get left(): boolean {
    this.markShown();
    return this.shown && !this.root.isConnected;
  }

  // markShown notes that the page is in the document, if it is.
  markShown() {
    this.shown ||= this.root.isConnected;
  }

  constructor(
    readonly path: string,
    traffic: HTMLElement,
  ) {
    this.root.append(
      this.head,
      h("section", {}, h("h2", {}, "Clusters"), h("p", { class: "graph-controls" }, h("label", {}, "filter ", this.clusterFilter), this.stateFilter), this.clusters),
      traffic,
      section("Outputs", this.outputs),
      this.rest,
    );
  }

  // load fetches the first description once, however many renders ask
  // for it meanwhile; one that failed is fetched again by the next.
  load(): Promise<void> {
    this.first ??= this.update(false).catch((err) => {
      this.first = undefined;
      throw err;
    });
    return this.first;
  }

  // update fetches the description again, one fetch at a time; a live
  // update waits until policyRefresh has passed since the last fetch.
  async update(live = true): Promise<void> {
    if (this.fetching) {
      this.again = true;
      return;
    }
    this.fetching = true;
    try {
      let first = true;
      do {
        this.again = false;
        const wait = (live || !first) && this.d ? this.fetchedAt + policyRefresh - Date.now() : 0;
        first = false;
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const sep = this.path.includes("?") ? "&" : "?";
        this.d = await getJSON<PolicyDescription>(`${this.path}${sep}outputs=${this.limits.outputs}&match=${encodeURIComponent(this.clusterFilter.value.trim())}`);
        this.fetchedAt = Date.now();
        this.draw();
        // A description the server is computing again: ask again.
        if (this.d.stale && document.body.contains(this.root)) this.again = true;
      } while (this.again);
    } finally {
      this.fetching = false;
    }
  }

  // refilter draws the clusters the filter keeps at once, and asks the
  // server for their outputs when the reader pauses.
  private refilter() {
    this.draw();
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.update(false), 300);
  }

  private draw() {
    this.markShown();
    const d = this.d;
    if (!d) return;
    const p = d.status;
    this.root.setAttribute("data-policy", policyKey(p));
    this.root.setAttribute("data-state", p.state);
    const problems = [...p.errors.map((e) => h("li", { class: "error" }, e)), ...p.warnings.map((w) => h("li", { class: "warning" }, w))];
    const stateOf = (c: PolicyDescription["clusters"][number]) => (c.errors.length ? "failed" : c.pending ? "pending" : "applied");
    const counts = new Map<string, number>();
    for (const c of d.clusters) counts.set(stateOf(c), (counts.get(stateOf(c)) ?? 0) + 1);
    this.head.replaceChildren(
      h("h1", {}, `${p.kind} ${p.namespace}/${p.name} `, h("span", { class: `badge state-${p.state}` }, p.state)),
      h(
        "dl",
        {},
        h("dt", {}, "source"),
        h("dd", {}, p.sourceCluster ? `cluster ${p.sourceCluster}` : "management"),
        h("dt", {}, "applied"),
        h("dd", { class: "applied", "data-applied": `${p.appliedClusters}/${p.targetClusters}` }, `${p.appliedClusters}/${p.targetClusters} clusters`),
        p.rollout ? [h("dt", {}, "rollout"), h("dd", { id: "policy-rollout" }, link("/rollout", p.rollout))] : null,
        h("dt", {}, "clusters"),
        h("dd", { id: "policy-counts" }, ["applied", "pending", "failed"].map((s) => `${(counts.get(s) ?? 0).toLocaleString("en")} ${s}`).join(" · ")),
      ),
    );
    const q = this.clusterFilter.value.trim().toLowerCase();
    const want = this.stateFilter.value;
    const clusters = d.clusters.filter((c) => (!q || c.cluster.toLowerCase().includes(q)) && (want === "all" || stateOf(c) === want)).sort((a, b) => natural(a.cluster, b.cluster));
    // The server sends the outputs of the clusters the filter matches, a
    // page of them in natural order.
    const outputs = d.outputs.filter((o) => !q || o.cluster.toLowerCase().includes(q));
    this.clusters.replaceChildren(
      table(
        ["cluster", "state", "resources", "errors"],
        clusters.slice(0, this.limits.clusters).map((c) => {
          const state = stateOf(c);
          return h(
            "tr",
            { "data-cluster": c.cluster, "data-state": state },
            h("td", {}, link(route("clusters", c.cluster), c.cluster)),
            h("td", { class: state === "applied" ? "ok" : state === "failed" ? "error" : "warning" }, state),
            h("td", {}, c.resources),
            h("td", {}, c.errors.join("; ") || "-"),
          );
        }),
        { id: "policy-clusters" },
      ),
      this.more("clusters", Math.min(clusters.length, this.limits.clusters), clusters.length, d.clusters.length),
    );
    this.outputs.replaceChildren(outputsTable(outputs, false), this.more("outputs", outputs.length, d.outputsMatching ?? outputs.length, d.outputsTotal ?? outputs.length));
    this.rest.replaceChildren(
      section("Problems", h("ul", { class: "notes" }, problems.length ? problems : h("li", { class: "muted" }, "none"))),
      diagnostics(d.diagnostics),
      section("Policy", h("pre", { class: "yaml" }, pretty(d.body))),
    );
  }

  // more says how many rows of those matching a table draws, and offers
  // the next page.
  private more(what: "clusters" | "outputs", drawn: number, shown: number, total: number): HTMLElement {
    return h(
      "p",
      { class: "muted table-more", "data-more": what },
      `${drawn.toLocaleString("en")} of ${shown.toLocaleString("en")}${shown !== total ? ` matching (${total.toLocaleString("en")} in all)` : ""} `,
      shown > drawn
        ? h(
            "button",
            {
              type: "button",
              class: "linkish more",
              onclick: () => {
                this.limits[what] += pageRows;
                if (what === "outputs") this.update(false);
                else this.draw();
              },
            },
            `show ${Math.min(pageRows, shown - drawn)} more`,
          )
        : null,
    );
  }
}

let policyPage: PolicyPage | undefined;

const policy: Page = async ({ args }) => {
  const [kind, namespace, name, source] = args;
  const q = source ? `?cluster=${encodeURIComponent(source)}` : "";
  const path = `/api/policies/${[kind, namespace, name].map(encodeURIComponent).join("/")}${q}`;
  // A page left and come back to is made anew, so that its traffic polls
  // again; one not shown yet is kept: a live update that comes while its
  // first description is fetched must not fetch it again.
  if (policyPage?.path !== path || policyPage.left) policyPage = new PolicyPage(path, policyTrafficSection(kind, namespace, name, source));
  // The first description is waited for; a live update redraws the page
  // when its fetch comes back.
  const page = policyPage;
  if (!page.loaded) await page.load();
  else page.update().catch(() => {});
  // The render puts the page in the document once this returns.
  requestAnimationFrame(() => page.markShown());
  return page.root;
};

const destination: Page = async ({ args }) => {
  const [namespace, name] = args;
  const d = await getJSON<DestinationDescription>(`/api/destinations/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`);
  return h(
    "div",
    { id: "destination", "data-destination": `${d.namespace}/${d.name}` },
    h("h1", {}, `Destination ${d.namespace}/${d.name}`),
    h("dl", {}, h("dt", {}, "clusters"), h("dd", {}, d.destinations.map((s) => s.cluster).join(", "))),
    section(
      "Services",
      table(
        ["cluster", "type", "ports", "workloads", "endpoints", "meshes"],
        d.destinations.map((s) =>
          h(
            "tr",
            { "data-cluster": s.cluster },
            h("td", {}, link(route("clusters", s.cluster), s.cluster)),
            h("td", {}, s.type),
            h("td", {}, s.ports.map((p) => `${p.name ? p.name + ":" : ""}${p.port}/${p.protocol}`).join(", ")),
            h("td", {}, s.workloads.join(", ") || "-"),
            h("td", {}, `${s.readyEndpoints}/${s.endpoints}`),
            h("td", {}, s.meshes.join(", ") || "-"),
          ),
        ),
        { id: "services" },
      ),
    ),
    section(
      "Workloads",
      table(
        ["cluster", "workload", "service account", "replicas", "endpoints", "meshes", "localities"],
        d.workloads.map((w) =>
          h(
            "tr",
            {},
            h("td", {}, w.cluster),
            h("td", {}, `${w.kind}/${w.name}`),
            h("td", {}, w.serviceAccount),
            h("td", {}, w.replicas),
            h("td", {}, `${w.readyEndpoints}/${w.endpoints}`),
            h("td", {}, w.meshes.join(", ") || "-"),
            h("td", {}, w.localities.join(", ") || "-"),
          ),
        ),
      ),
    ),
    callersSection(d.namespace, d.name),
    section("Policies selecting it", policiesTable(d.policies)),
    section("Outputs for it", outputsTable(d.outputs, true)),
    diagnostics(d.diagnostics),
  );
};

let rolloutPage: RolloutPage | undefined;

// rollout is the staged rollout's page; a page left and come back to is
// made anew, so that it polls again.
const rollout: View = async ({ status: st }) => {
  if (!rolloutPage?.root.isConnected) rolloutPage = new RolloutPage();
  rolloutPage.status(st);
  // The first answer is waited for; a live update redraws the page when
  // its fetch comes back.
  if (!rolloutPage.loaded) await rolloutPage.update();
  else rolloutPage.update().catch(() => {});
  return rolloutPage.root;
};

export const views: Record<string, View> = {
  "": fleet,
  clusters: cluster,
  rollout,
};

export const pages: Record<string, Page> = {
  policies: policy,
  destinations: destination,
};
