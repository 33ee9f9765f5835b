// The UI's pages, one per route.
import { clusterState, getText, policyKey, type PolicyStatus, type Status } from "./api";
import { ago, h, link, route, section, table } from "./dom";
import { fleetGraph } from "./graph";
import { fleetRelations } from "./relations";

export interface Context {
  status: Status;
  args: string[];
  go: (route: string) => void;
}

export type View = (ctx: Context) => Promise<HTMLElement>;

function policyRows(ps: PolicyStatus[]): HTMLElement[] {
  return ps.map((p) => {
    const key = policyKey(p);
    const notes = [...p.errors.map((e) => h("li", { class: "error" }, e)), ...p.warnings.map((w) => h("li", { class: "warning" }, w))];
    return h(
      "tr",
      { "data-policy": key, "data-state": p.state },
      h("td", {}, p.kind),
      h("td", {}, link(route("policies", p.kind, p.namespace, p.name), `${p.namespace}/${p.name}`)),
      h("td", {}, p.sourceCluster || "management"),
      h("td", {}, h("span", { class: `badge state-${p.state}` }, p.state)),
      h("td", { class: "applied", "data-applied": `${p.appliedClusters}/${p.targetClusters}` }, `${p.appliedClusters}/${p.targetClusters}`),
      h("td", {}, notes.length ? h("ul", { class: "notes" }, notes) : "-"),
    );
  });
}

function banner(st: Status): HTMLElement | null {
  const parts: (HTMLElement | string)[] = [];
  if (st.safeMode) parts.push(h("p", { class: "banner safe" }, `Safe mode: nothing is pruned until ${st.waitingFor.join(", ") || "the window ends"} report.`));
  if (st.store !== "ok") parts.push(h("p", { class: "banner degraded" }, `Store ${st.store}`));
  return parts.length ? h("div", {}, parts) : null;
}

const fleet: View = async ({ status: st, go }) => {
  const rel = await fleetRelations(st);
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
    section(`Fleet — ${st.clusters.length} clusters, server ${st.serverId}`, legend, h("div", { class: "graph-wrap" }, fleetGraph(st, rel.destinations, rel.edges, go))),
    section(
      "Policies",
      table(["kind", "policy", "source", "state", "applied", "diagnostics"], policyRows(st.policies), { id: "policies" }),
    ),
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

const cluster: View = async ({ status: st, args }) => {
  const [name, sub, backend] = args;
  const c = st.clusters.find((c) => c.name === name);
  if (!c) return h("p", { class: "error" }, `No cluster ${name} is registered.`);
  if (sub === "outputs" && backend) return outputs(name, backend);
  const state = clusterState(c, st);
  return h(
    "div",
    { id: "cluster", "data-cluster": name },
    h("h1", {}, `Cluster ${name} `, h("span", { class: `badge state-${state}` }, state)),
    h(
      "dl",
      {},
      h("dt", {}, "meshes"),
      h("dd", {}, c.meshes.join(", ") || "-"),
      h("dt", {}, "connected"),
      h("dd", {}, c.connected ? `yes (replica ${c.replica || "-"})` : "no"),
      h("dt", {}, "last seen"),
      h("dd", {}, ago(c.lastSeen)),
      h("dt", {}, "input"),
      h("dd", {}, `version ${c.inputVersion}, ${c.inputResources} resources, hash ${c.inputHash || "-"}, updated ${ago(c.inputUpdated)}`),
      h("dt", {}, "registered"),
      h("dd", {}, ago(c.registered)),
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

const policy: View = async ({ status: st, args }) => {
  const [kind, namespace, name] = args;
  const p = st.policies.find((p) => p.kind === kind && p.namespace === namespace && p.name === name);
  if (!p) return h("p", { class: "error" }, `No policy ${kind} ${namespace}/${name}.`);
  return h(
    "div",
    { id: "policy", "data-policy": policyKey(p), "data-state": p.state },
    h("h1", {}, `${p.kind} ${p.namespace}/${p.name} `, h("span", { class: `badge state-${p.state}` }, p.state)),
    h(
      "dl",
      {},
      h("dt", {}, "source"),
      h("dd", {}, p.sourceCluster || "management"),
      h("dt", {}, "applied"),
      h("dd", { class: "applied", "data-applied": `${p.appliedClusters}/${p.targetClusters}` }, `${p.appliedClusters}/${p.targetClusters} clusters`),
    ),
    section("Errors", h("ul", { class: "notes" }, p.errors.length ? p.errors.map((e) => h("li", { class: "error" }, e)) : h("li", { class: "muted" }, "none"))),
    section("Warnings", h("ul", { class: "notes" }, p.warnings.length ? p.warnings.map((e) => h("li", { class: "warning" }, e)) : h("li", { class: "muted" }, "none"))),
  );
};

const destination: View = async ({ args }) => {
  const [c, ns, name] = args;
  return h("div", { id: "destination" }, h("h1", {}, `Destination ${ns}/${name} in ${c}`));
};

export const views: Record<string, View> = {
  "": fleet,
  clusters: cluster,
  policies: policy,
  destinations: destination,
};
