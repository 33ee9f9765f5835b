// The rollout page: the staged rollout in progress, or the last one —
// its phase, stages, counts and each cluster's state — kept live by its
// own polling of /api/rollout (core/ui/rollout.go) and by the status
// events, and the error rate around the change of each policy it
// carries. At a thousand clusters a stage's list is collapsed to its
// counts, opened on click and drawn a page at a time.
import { getJSON, policyKey, type PolicyStatus, type RolloutCluster, type RolloutPage as Page, type RolloutStage, type Status } from "./api";
import { ago, h, link, route, section, table } from "./dom";
import { policyTraffic } from "./traffic";

// every is how often the page asks for the rollout while it is shown.
const every = 2000;
// shortList is the most clusters a stage lists without being opened.
const shortList = 20;
// pageRows is how many more clusters "show more" lists.
const pageRows = 100;

type Carried = Pick<PolicyStatus, "kind" | "namespace" | "name">;

function stateClass(state: string): string {
  return state === "Failed" ? "error" : state === "Progressing" ? "warning" : state === "Succeeded" ? "ok" : "muted";
}

function short(rev: string): string {
  return rev ? rev.slice(0, 12) : "-";
}

// RolloutPage is the rollout's page, kept across live updates so that
// the stages the reader opened, the filter and the lists' lengths stay.
export class RolloutPage {
  readonly root = h("div", { id: "rollout" });
  private readonly head = h("div", {});
  private readonly gates = h("div", {});
  private readonly filter = h("input", {
    id: "rollout-filter",
    type: "search",
    placeholder: "cluster",
    "aria-label": "filter clusters by name",
    autocomplete: "off",
    oninput: () => {
      clearTimeout(this.typing);
      this.typing = window.setTimeout(() => this.update().catch(() => {}), 300);
    },
  }) as HTMLInputElement;
  private readonly stages = h("div", { id: "rollout-stages" });
  private readonly traffic = h("div", { id: "rollout-traffic" });
  private page?: Page;
  private shown = "";
  // opened holds the stages the reader opened or closed; limits how many
  // clusters each lists.
  private readonly opened = new Map<string, boolean>();
  private readonly limits = new Map<string, number>();
  // carried are the policies the rollout carries, by key: the status
  // names them only while it runs, so they are remembered for its id.
  private carried = new Map<string, Carried>();
  private carriedFor = "";
  private readonly trafficShown = new Map<string, HTMLElement>();
  private fetching = false;
  private again = false;
  private timer = 0;
  private typing = 0;

  constructor() {
    this.root.append(
      this.head,
      this.gates,
      h("section", {}, h("h2", {}, "Stages"), h("p", { class: "graph-controls" }, h("label", {}, "filter ", this.filter)), this.stages),
      section("Traffic around the change", h("p", { class: "muted" }, "The error rate of the destinations each policy the rollout carries selects, before and after its last change."), this.traffic),
    );
  }

  get loaded(): boolean {
    return this.page !== undefined;
  }

  // status takes the fleet's status: the policies the rollout carries.
  // The root says how many clusters the fleet had in the last status.
  status(st: Status) {
    this.root.dataset.fleetClusters = String(st.clusters.length);
    this.remember(st.policies);
  }

  // update fetches the rollout again, one fetch at a time, and keeps
  // polling while the page is shown.
  async update(): Promise<void> {
    if (this.fetching) {
      this.again = true;
      return;
    }
    this.fetching = true;
    try {
      do {
        this.again = false;
        const q = new URLSearchParams();
        const match = this.filter.value.trim();
        if (match) q.set("match", match);
        for (const [stage, n] of this.limits) q.append("show", `${stage}:${n}`);
        const text = JSON.stringify(await getJSON<Page>(`/api/rollout${q.size ? "?" + q : ""}`));
        // Unchanged: nothing is redrawn, so the reader's focus stays.
        if (text !== this.shown) {
          this.shown = text;
          this.page = JSON.parse(text) as Page;
          this.draw();
        }
      } while (this.again);
    } finally {
      this.fetching = false;
      clearTimeout(this.timer);
      this.timer = window.setTimeout(() => {
        if (this.root.isConnected) this.update().catch(() => {});
      }, every);
    }
  }

  private remember(ps: PolicyStatus[]) {
    for (const p of ps) {
      const m = /^rollout (\d+) /.exec(p.rollout ?? "");
      if (!m || p.sourceCluster) continue;
      if (m[1] !== this.carriedFor) {
        this.carriedFor = m[1];
        this.carried = new Map();
      }
      this.carried.set(policyKey(p), { kind: p.kind, namespace: p.namespace, name: p.name });
    }
    try {
      if (this.carriedFor) sessionStorage.setItem(`meshrelay-rollout-${this.carriedFor}`, JSON.stringify([...this.carried.values()]));
    } catch {
      // storage refused: the page remembers them while it is open
    }
  }

  private draw() {
    const p = this.page!;
    const ro = p.rollout;
    if (!ro) {
      this.root.removeAttribute("data-rollout");
      this.root.setAttribute("data-phase", "none");
      this.head.replaceChildren(
        h("h1", {}, "Rollout"),
        h("p", { class: "muted", id: "rollout-none" }, p.none ?? "No rollout yet."),
        h("p", { class: "muted" }, "A RolloutStrategy among the management policies stages every change of them; see README's “Changing the fleet safely”."),
      );
      this.gates.replaceChildren();
      this.stages.replaceChildren();
      this.drawTraffic();
      return;
    }
    const current = ro.stages[ro.stage]?.name ?? "";
    this.root.setAttribute("data-rollout", ro.id);
    this.root.setAttribute("data-phase", ro.phase);
    this.root.setAttribute("data-stage", current);
    if (ro.id !== this.carriedFor) this.restore(ro.id);
    const counts = { total: ro.total, released: ro.released, healthy: ro.healthy, failed: ro.failed, pending: ro.pending };
    this.head.replaceChildren(
      h("h1", {}, `Rollout ${ro.id} `, h("span", { class: `badge state-${ro.phase}`, id: "rollout-phase" }, ro.phase)),
      h(
        "dl",
        {},
        h("dt", {}, "revisions"),
        h("dd", { class: "mono", id: "rollout-revisions", title: `${ro.fromRevision} → ${ro.toRevision}` }, `${short(ro.fromRevision)} → ${short(ro.toRevision)}`, ro.liveRevision ? h("span", { class: "muted" }, ` (live: ${short(ro.liveRevision)})`) : null),
        h("dt", {}, "stage"),
        h("dd", { id: "rollout-stage", "data-stage": current }, current ? `${current} (${ro.stage + 1} of ${ro.stages.length})` : `all ${ro.stages.length} done`),
        h("dt", {}, "reason"),
        h("dd", { id: "rollout-reason", class: ro.phase === "Paused" ? "error" : "" }, ro.reason || "-"),
        h("dt", {}, "clusters"),
        h(
          "dd",
          { id: "rollout-counts", ...Object.fromEntries(Object.entries(counts).map(([k, v]) => [`data-${k}`, v])) },
          Object.entries(counts)
            .map(([k, v]) => `${v.toLocaleString("en")} ${k}`)
            .join(" · "),
        ),
        h("dt", {}, "started"),
        h("dd", {}, ro.started ? `${new Date(ro.started).toLocaleString()} (${ago(ro.started)})` : "-"),
        ro.ended ? [h("dt", {}, "ended"), h("dd", {}, `${new Date(ro.ended).toLocaleString()} (${ago(ro.ended)})`)] : null,
        h("dt", {}, "next revision"),
        h("dd", { id: "rollout-queued", "data-queued": String(ro.queued) }, ro.queued ? "a newer policy set waits for this rollout to end" : "none queued"),
      ),
    );
    this.gates.replaceChildren(
      ...p.gates.map((g) =>
        h(
          "p",
          { class: `banner gate${g === current ? " now" : ""}`, "data-gate": g },
          g === current ? `Stage ${g} awaits approval: ` : `Stage ${g} will wait for approval: `,
          h("code", {}, `meshrelay rollout approve ${g}`),
          " (the UI is read-only).",
        ),
      ),
    );
    this.stages.replaceChildren(...p.stages.map((s, i) => this.stage(s, i, ro.stages[i]?.clusters ?? s.total)));
    this.drawTraffic();
  }

  // restore takes the policies a rollout carried from the tab's storage,
  // for a page opened after the rollout ended.
  private restore(id: string) {
    try {
      const kept = JSON.parse(sessionStorage.getItem(`meshrelay-rollout-${id}`) ?? "[]") as Carried[];
      this.carriedFor = id;
      this.carried = new Map(kept.map((c) => [policyKey(c), c]));
    } catch {
      this.carried = new Map();
    }
  }

  private stage(s: RolloutStage, i: number, total: number): HTMLElement {
    const open = this.opened.get(s.name) ?? total <= shortList;
    // data-key: the redraw of a live update (main.ts) opens again only
    // the details it finds open with the same key.
    const d = h(
      "details",
      { class: "stage", "data-key": `rollout-stage/${s.name}`, "data-stage": s.name, "data-state": s.state, "data-total": s.total, open },
      h(
        "summary",
        {},
        h("strong", {}, `${i + 1}. ${s.name} `),
        h("span", { class: `badge state-${s.state}` }, s.state),
        s.approval ? h("span", { class: "muted" }, s.approved ? " approved" : " gated") : null,
        " — ",
        h(
          "span",
          { class: "stage-counts", ...Object.fromEntries(Object.entries(s.counts).map(([k, v]) => [`data-${k.toLowerCase()}`, v])) },
          `${s.total.toLocaleString("en")} cluster${s.total === 1 ? "" : "s"}: ` +
            ["Succeeded", "Progressing", "Failed", "Pending"]
              .filter((k) => s.counts[k])
              .map((k) => `${s.counts[k].toLocaleString("en")} ${k}`)
              .join(" · "),
        ),
      ),
    ) as HTMLDetailsElement;
    d.addEventListener("toggle", () => this.opened.set(s.name, d.open));
    const rows = s.clusters.map((c) => clusterRow(c));
    d.append(
      table(["cluster", "state", "reason", "released", "healthy since"], rows, { class: "rollout-clusters" }),
      h(
        "p",
        { class: "muted table-more", "data-more": s.name },
        `${s.clusters.length.toLocaleString("en")} of ${s.matching.toLocaleString("en")}${s.matching !== s.total ? ` matching (${s.total.toLocaleString("en")} in all)` : ""} `,
        s.matching > s.clusters.length
          ? h(
              "button",
              {
                type: "button",
                class: "linkish more",
                onclick: () => {
                  this.limits.set(s.name, s.clusters.length + pageRows);
                  this.update().catch(() => {});
                },
              },
              `show ${Math.min(pageRows, s.matching - s.clusters.length)} more`,
            )
          : null,
      ),
    );
    return d;
  }

  private drawTraffic() {
    for (const [key, c] of this.carried) {
      if (this.trafficShown.has(key)) continue;
      const el = policyTraffic(c.kind, c.namespace, c.name);
      this.trafficShown.set(key, el);
      this.traffic.append(el);
    }
    for (const [key, el] of this.trafficShown) {
      if (!this.carried.has(key)) {
        el.remove();
        this.trafficShown.delete(key);
      }
    }
    if (this.trafficShown.size === 0) this.traffic.replaceChildren(h("p", { class: "muted", id: "rollout-no-traffic" }, "No policy change carried by this rollout is known to this page."));
    else this.traffic.querySelector("#rollout-no-traffic")?.remove();
  }
}

function clusterRow(c: RolloutCluster): HTMLElement {
  return h(
    "tr",
    { "data-cluster": c.name, "data-state": c.state },
    h("td", {}, link(route("clusters", c.name), c.name)),
    h("td", { class: stateClass(c.state) }, c.state),
    h("td", {}, c.reason || "-"),
    h("td", {}, c.released ? ago(c.released) : "-"),
    h("td", {}, c.healthySince ? ago(c.healthySince) : "-"),
  );
}
