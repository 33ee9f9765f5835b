// Package discovery owns the agent's sources: what a workload cluster runs,
// turned into the input snapshot the agent relays to the server.
//
// Two sources publish the same snapshot for the same objects:
//
//   - [Kube] watches a cluster with client-go informers: the built-in
//     Services, EndpointSlices, Deployments, StatefulSets, DaemonSets,
//     ReplicaSets, ServiceAccounts, Namespaces and Nodes (name and topology
//     labels only), and the custom resources of exactly the declared input
//     kinds ("group/Kind": what the server's plugins read, and the policy
//     kinds) whose CRDs exist. CRDs that appear or go away later are
//     followed, and so are the declared kinds: [Kube.DeclareInputKinds]
//     starts watching a new kind and stops watching, and drops from the
//     snapshot, a kind no longer declared. The discovery.meshrelay.io kinds
//     are never watched: the source computes them. Until it knows its kinds
//     (KubeOptions.InputKinds, or the agent declaring those of the server's
//     Welcome or of its state directory) it publishes nothing, since a
//     snapshot without the custom resources would make the fleet translate,
//     and agents prune, from a partial view.
//   - [Dir] reads a directory of YAML (multi-document, recursive) with the
//     manifest reader of core/manifest and watches it for changes
//     (fsnotify), reading it again shortly after each one and every 30
//     seconds in case a notification was lost; it polls a directory it
//     cannot watch, such as one that does not exist yet. A malformed file
//     or document is logged and skipped.
//
// Both strip noise before hashing ([Normalize] adds kind-specific stripping
// to [snapshot.Normalize]: Node status and most labels, EndpointSlice
// condition churn, rollout annotations), so a snapshot is published only when
// meaning changes, never for status-only churn. Both add the internal
// resources [Compute] derives from the objects: discovery.meshrelay.io Mesh
// and Gateway kinds.
//
// # Adding a mesh
//
// Compute runs one detector per mesh, the rows of the detectors table in
// compute.go; each detector is a file of its own (istio.go, cilium.go,
// envoy.go). A new mesh is one new file and one row:
//
//	// linkerd.go
//	var linkerdDetector = detector{mesh: discoveryv1alpha1.MeshLinkerd, detect: detectLinkerd}
//
//	func detectLinkerd(c *inventory) (*discoveryv1alpha1.MeshSpec, []discoveryv1alpha1.Gateway) {
//		for _, w := range c.workloadsWith("linkerd-destination") {
//			if w.Kind == "Deployment" && w.Metadata.Name == "linkerd-destination" {
//				d := w.container("destination")
//				return &discoveryv1alpha1.MeshSpec{Namespace: w.Metadata.Namespace, Version: imageVersion(d.Image)}, nil
//			}
//		}
//		return nil, nil
//	}
//
// A detector reads the cluster through the inventory, which decodes only
// the objects whose bodies hold the detector's marker (a name or label it
// looks for): workloads (with their containers' images, args and
// environment), Services, Namespace labels and ConfigMap data. It returns
// the Mesh's spec, or nil when the cluster does not run the mesh, and the
// mesh's east-west Gateways; Compute fills in the kinds and the mesh type,
// drops invalid Gateways and sorts. The mesh type is one of
// api/discovery/v1alpha1's Mesh constants. A ConfigMap a detector reads is
// named in its configMaps, which keeps it out of snapshots (it is never an
// input); the Kube source watches ConfigMaps by name, an informer each
// (derivedWatches in kube.go), and the agent's chart grants them by name
// (deploy/charts/meshrelay-agent/templates/rbac.yaml), so a detector that
// reads a new ConfigMap also adds it there.
//
// Both implement the agent's source contract:
//
//	src, err := discovery.NewKube(cfg, discovery.KubeOptions{Logger: log})
//	err = src.DeclareInputKinds(kinds) // before or while Run runs
//	err = src.Run(ctx, func(s *snapshot.Snapshot) { ... })
//
// Run blocks until ctx ends; publish is called from Run's goroutine with
// complete, immutable snapshots whose versions count up from 1.
package discovery
