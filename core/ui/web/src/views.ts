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
import { fleetGraph } from "./graph";
import { fleetRelations } from "./relations";
import { callersSection, overlayTraffic, policyTrafficSection } from "./traffic";

export interface Context {
  status: Status;
  args: string[];
  go: (route: string) => void;
}

export type View = (ctx: Context) => Promise<HTMLElement>;

function policyRoute(p: PolicyStatus): string {
  const parts = ["policies", p.kind, p.namespace, p.name];
  return route(...(p.sourceCluster ? [...parts, p.sourceCluster] : parts));
}

function policyRows(ps: PolicyStatus[]): HTMLElement[] {
  return ps.map((p) => {
    const notes = [...p.errors.map((e) => h("li", { class: "error" }, e)), ...p.warnings.map((w) => h("li", { class: "warning" }, w))];
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
        h("td", {}, o.body ? h("details", { "data-key": `${o.cluster}/${o.backend}/${o.kind}/${name}` }, h("summary", {}, name), h("pre", { class: "yaml" }, pretty(o.body))) : name),
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
  return parts.length ? h("div", {}, parts) : null;
}

const fleet: View = async ({ status: st, go }) => {
  const rel = await fleetRelations();
  const legend = h(
    "p",
    { class: "legend" },
    ["connected", "stale", "safe-mode", "disconnected"].map((s) => h("span", { class: `swatch state-${s}` }, s)),
    h("span", { class: "swatch edge-VirtualDestination" }, "VirtualDestination"),
    h("span", { class: "swatch edge-AccessPolicy" }, "AccessPolicy"),
  );
  return h(
    "div",
    { id: "fleet" },
    banner(st),
    section(`Fleet — ${st.clusters.length} clusters, server ${st.serverId}`, legend, h("div", { class: "graph-wrap" }, overlayTraffic(fleetGraph(st, rel.destinations, rel.edges, go)))),
    section("Policies", policiesTable(st.policies, "policies")),
    section(
      "Plugins",
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
    ),
  );
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

const policy: View = async ({ args }) => {
  const [kind, namespace, name, source] = args;
  const q = source ? `?cluster=${encodeURIComponent(source)}` : "";
  const d = await getJSON<PolicyDescription>(`/api/policies/${[kind, namespace, name].map(encodeURIComponent).join("/")}${q}`);
  const p = d.status;
  const problems = [...p.errors.map((e) => h("li", { class: "error" }, e)), ...p.warnings.map((w) => h("li", { class: "warning" }, w))];
  return h(
    "div",
    { id: "policy", "data-policy": policyKey(p), "data-state": p.state },
    h("h1", {}, `${p.kind} ${p.namespace}/${p.name} `, h("span", { class: `badge state-${p.state}` }, p.state)),
    h(
      "dl",
      {},
      h("dt", {}, "source"),
      h("dd", {}, p.sourceCluster ? `cluster ${p.sourceCluster}` : "management"),
      h("dt", {}, "applied"),
      h("dd", { class: "applied", "data-applied": `${p.appliedClusters}/${p.targetClusters}` }, `${p.appliedClusters}/${p.targetClusters} clusters`),
    ),
    section(
      "Clusters",
      table(
        ["cluster", "state", "resources", "errors"],
        d.clusters.map((c) => {
          const state = c.errors.length ? "failed" : c.pending ? "pending" : "applied";
          return h(
            "tr",
            { "data-cluster": c.cluster, "data-state": state },
            h("td", {}, link(route("clusters", c.cluster), c.cluster)),
            h("td", { class: state === "applied" ? "ok" : state === "failed" ? "error" : "warning" }, state),
            h("td", {}, c.resources),
            h("td", {}, c.errors.join("; ") || "-"),
          );
        }),
      ),
    ),
    policyTrafficSection(kind, namespace, name, source),
    section("Outputs", outputsTable(d.outputs, false)),
    section("Problems", h("ul", { class: "notes" }, problems.length ? problems : h("li", { class: "muted" }, "none"))),
    diagnostics(d.diagnostics),
    section("Policy", h("pre", { class: "yaml" }, pretty(d.body))),
  );
};

const destination: View = async ({ args }) => {
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

export const views: Record<string, View> = {
  "": fleet,
  clusters: cluster,
  policies: policy,
  destinations: destination,
};
