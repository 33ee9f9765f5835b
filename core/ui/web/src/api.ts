// The UI's API: protojson of the admin API (proto/relay/v1/relay.proto).

export interface OutputStatus {
  backend: string;
  resources: number;
  hash: string;
  applied: boolean;
  errors: number;
}

export interface ClusterStatus {
  name: string;
  revoked: boolean;
  connected: boolean;
  replica: string;
  lastSeen?: string | null;
  inputVersion: string;
  inputHash: string;
  inputUpdated?: string | null;
  inputResources: number;
  meshes: string[];
  stale: boolean;
  outputs: OutputStatus[];
  registered?: string | null;
  labels?: Record<string, string>;
}

export interface PolicyStatus {
  kind: string;
  namespace: string;
  name: string;
  sourceCluster: string;
  state: string;
  appliedClusters: number;
  targetClusters: number;
  errors: string[];
  warnings: string[];
  // rollout is set while a staged rollout carries the policy's latest
  // change: "rollout 2 Progressing at stage canary: 3/9 released, …".
  rollout?: string;
}

export interface PluginStatus {
  name: string;
  backends: string[];
  healthy: boolean;
  error: string;
}

export interface Status {
  serverId: string;
  store: string;
  safeMode: boolean;
  waitingFor: string[];
  clusters: ClusterStatus[];
  policies: PolicyStatus[];
  plugins: PluginStatus[];
}

export interface Destination {
  cluster: string;
  namespace: string;
  name: string;
  labels: Record<string, string>;
  type: string;
  ports: { name: string; port: number; protocol: string; targetPort: string; appProtocol: string }[];
  workloads: string[];
  endpoints: number;
  readyEndpoints: number;
  meshes: string[];
  clusterCount: number;
}

export interface Workload {
  cluster: string;
  namespace: string;
  name: string;
  kind: string;
  serviceAccount: string;
  replicas: number;
  localities: string[];
  meshes: string[];
  destinations: string[];
  endpoints: number;
  readyEndpoints: number;
}

export interface OutputResource {
  cluster: string;
  backend: string;
  apiVersion: string;
  kind: string;
  namespace: string;
  name: string;
  policies: string[];
  applied: boolean;
  error: string;
  body: string;
}

export interface Diagnostic {
  severity: string;
  summary: string;
  detail: string;
  path: string;
  cluster: string;
  plugin: string;
  policy: string;
}

export interface Mesh {
  cluster: string;
  name: string;
  type: string;
  namespace: string;
  version: string;
  trustDomain: string;
  network: string;
  envoyNodes: string[];
  workloads: number;
}

export interface DestinationDescription {
  namespace: string;
  name: string;
  destinations: Destination[];
  workloads: Workload[];
  policies: PolicyStatus[];
  outputs: OutputResource[];
  diagnostics: Diagnostic[];
}

export interface PolicyDescription {
  // outputsTotal counts the policy's outputs, outputsMatching those of the
  // clusters the request's match keeps; outputs holds a page of those.
  outputsTotal?: number;
  outputsMatching?: number;
  // stale says the server is computing a newer description.
  stale?: boolean;
  status: PolicyStatus;
  body: string;
  clusters: { cluster: string; applied: boolean; resources: number; errors: string[]; pending: boolean }[];
  outputs: OutputResource[];
  diagnostics: Diagnostic[];
}

export interface ClusterDescription {
  status: ClusterStatus;
  meshes: Mesh[];
  workloads: number;
  destinations: number;
  policies: PolicyStatus[];
  diagnostics: Diagnostic[];
}

// RolloutStatus is the admin API's RolloutStatus, less its clusters.
export interface RolloutStatus {
  id: string;
  phase: string;
  reason: string;
  fromRevision: string;
  toRevision: string;
  liveRevision: string;
  stage: number;
  stages: { name: string; clusters: number; maxConcurrent: number; maxFailures: number; minHealthy?: string; progressDeadline?: string; approval: boolean; approved: boolean }[];
  total: number;
  released: number;
  healthy: number;
  failed: number;
  pending: number;
  started?: string | null;
  ended?: string | null;
  queued: boolean;
}

export interface RolloutCluster {
  name: string;
  state: string;
  reason?: string;
  released?: string;
  healthySince?: string;
}

// RolloutStage is a stage of the rollout page (core/ui/rollout.go): its
// state, its clusters' counts by state, and the first of its clusters.
export interface RolloutStage {
  name: string;
  state: string;
  approval: boolean;
  approved: boolean;
  total: number;
  matching: number;
  counts: Record<string, number>;
  clusters: RolloutCluster[];
}

export interface RolloutPage {
  rollout: RolloutStatus | null;
  none?: string;
  stages: RolloutStage[];
  gates: string[];
}

// Unauthorized is thrown when the token is missing or refused.
export class Unauthorized extends Error {}

export class APIError extends Error {
  constructor(
    public code: number,
    message: string,
  ) {
    super(message);
  }
}

async function check(resp: Response): Promise<Response> {
  if (resp.ok) return resp;
  let msg = resp.statusText;
  try {
    msg = (await resp.json()).error ?? msg;
  } catch {
    // not JSON: keep the status text
  }
  if (resp.status === 401) throw new Unauthorized(msg);
  throw new APIError(resp.status, msg);
}

export async function getJSON<T>(path: string): Promise<T> {
  const resp = await check(await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } }));
  return (await resp.json()) as T;
}

export async function getText(path: string): Promise<string> {
  const resp = await check(await fetch(path, { credentials: "same-origin" }));
  return resp.text();
}

export async function login(token: string): Promise<void> {
  await check(
    await fetch("/api/login", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token }),
    }),
  );
}

export async function logout(): Promise<void> {
  await fetch("/api/logout", { method: "POST", credentials: "same-origin" });
}

// clusterState is how the graph colours a cluster.
export function clusterState(c: ClusterStatus, st: Status): string {
  if (c.revoked) return "revoked";
  if (st.safeMode && st.waitingFor.includes(c.name)) return "safe-mode";
  if (c.stale || (!c.connected && c.inputResources > 0)) return "stale";
  if (c.connected) return "connected";
  return "disconnected";
}

export function policyKey(p: { kind: string; namespace: string; name: string }): string {
  return `${p.kind}/${p.namespace}/${p.name}`;
}
