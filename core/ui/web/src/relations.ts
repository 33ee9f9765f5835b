// What the graph draws besides clusters: destinations and the
// cross-cluster edges of policies, computed by the server (GET /api/graph).
import { getJSON } from "./api";
import type { GraphDestination, GraphEdge } from "./graph";

export interface Relations {
  destinations: GraphDestination[];
  edges: GraphEdge[];
  // stale says the server is computing newer relations.
  stale?: boolean;
}

export function fleetRelations(): Promise<Relations> {
  return getJSON<Relations>("/api/graph");
}
