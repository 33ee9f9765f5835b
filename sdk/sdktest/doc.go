// Package sdktest tests meshrelay translators: it runs a translator on a
// fleet fixture in process ([Run]) or as a real plugin process started
// through go-plugin ([RunPlugin]), both through the translator protocol,
// and compares the result with a golden file ([Golden]). [Session] sends
// fixtures one after another as deltas, and [CheckIncremental] checks that
// they add up to a full translation.
//
// Every answer goes through the host side of the protocol the server runs
// (sdk/protocol/host): an output that is not a Kubernetes object matching
// its identity, for a cluster not in the fixture or a backend the
// translator did not describe, or a set over the server's default byte
// limit fails the test as it would be refused in production.
//
// A fixture is a YAML file:
//
//	clusters:
//	- name: east
//	  meshes: [istio]
//	  stale: false
//	  labels: {region: us-east}   # the registry's labels, which clusterSelectors match
//	  manifests: [east/]          # files or directories of Kubernetes manifests, relative to the fixture
//	  objects:                    # and/or inline manifests
//	  - {apiVersion: v1, kind: Service, metadata: {name: reviews, namespace: bookinfo}}
//	policies:                     # policies of the management source, inline
//	- {apiVersion: policy.meshrelay.io/v1alpha1, kind: AccessPolicy, ...}
//	policyFiles: [policies/]      # and/or from files or directories
//
// Policies may also appear among a cluster's objects: they are then
// policies defined in that workload cluster.
//
// A golden test:
//
//	func TestGolden(t *testing.T) {
//		got := sdktest.Run(t, &Translator{}, "testdata/basic.yaml")
//		sdktest.Golden(t, "basic", got)
//	}
//
// `go test -update` rewrites testdata/<name>.golden.yaml. sdktest registers
// the -update flag; a test package that uses sdktest must not define its own.
//
// An incremental test edits a fixture one change at a time with a [Model]
// and checks that every step translated as a delta equals a full
// translation:
//
//	base := sdktest.ModelOf(t, fixture)
//	next := base.Clone(t)
//	next.Cluster("east").Remove(next.Cluster("east").Object("Service", "ratings"))
//	sdktest.CheckIncremental(t, &Translator{}, base.Fixture(t), next.Fixture(t))
package sdktest
