// Package testenv starts the real servers that meshrelay's integration tests
// run against: redis-server (alone, as a Sentinel set or as a Redis
// Cluster), and etcd with a kube-apiserver that serves the
// Istio and Cilium CustomResourceDefinitions.
//
// Nothing here is a fake. Each server is a child process of the test binary,
// listening on a free 127.0.0.1 port, keeping its data and its log in a
// temporary directory. Child processes run in their own process group and are
// killed when the test (or the test binary) ends, so nothing outlives go test.
// When a test fails, the logs of the servers it used are written to the test
// log.
//
// # Redis
//
//	r := testenv.StartRedis(t)
//	client := redis.NewClient(&redis.Options{Addr: r.Addr()})
//	r.Stop()  // kill the server, as a crash would
//	r.Start() // bring it back on the same port and data directory
//
// StartRedis runs without persistence unless RedisPersistence is given, in
// which case data written before Stop is still there after Start.
//
//	s := testenv.StartRedisSentinel(t) // a primary, two replicas, three Sentinels
//	url := s.URL()                     // redis+sentinel://s1,s2,s3/meshrelay
//	p, _ := s.Primary(ctx)             // the server the Sentinels name now
//	p.Stop()                           // kill -9 it: the Sentinels fail over
//
//	c := testenv.StartRedisCluster(t) // three primaries sharing the slots
//	url := c.URL()                    // redis+cluster://n1,n2,n3
//
// StartRedisSentinel returns once every Sentinel sees both replicas and the
// other Sentinels, so a failover can start at once; its Sentinels call a
// primary down after 1 s without an answer. StartRedisCluster joins its
// nodes with redis-cli --cluster create and returns once every node reports
// the cluster ok; Reshard moves a node's slots to another with redis-cli
// --cluster reshard.
//
// # Kubernetes
//
//	k := testenv.StartKube(t) // etcd + kube-apiserver + Istio and Cilium CRDs
//	cs := kubernetes.NewForConfigOrDie(k.Config())
//	k.InstallCRDs(t, "deploy/crds") // more CRDs, paths relative to the repository root
//
// The API server has no controllers (no kube-controller-manager, scheduler or
// kubelet): objects are stored and validated, but nothing acts on them. A
// Deployment never gets Pods, a deleted Namespace stays Terminating, and no
// "default" ServiceAccount is created (the ServiceAccount admission plugin is
// disabled so Pods can still be created). Clients authenticate with a static
// token in the system:masters group.
//
// Starting an API server takes a few seconds, so a package that needs one in
// many tests shares one instance:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		k := testenv.SharedKube(t)
//		ns := k.CreateNamespace(t) // isolate from the other tests
//		...
//	}
//
// # Chromium
//
//	path := testenv.Chromium(t) // the browser that web UI tests drive (chromedp)
//
// # Missing servers
//
// The servers come from Debian's redis-server (with redis-tools'
// redis-cli), etcd-server and chromium packages and from bin/kube-apiserver, which is built from the tools/kube
// module; `make testdeps` (hack/testdeps.sh) provides all of them. When one is missing the
// test is skipped with a message saying how to install it, unless CI=true or
// MESHRELAY_REQUIRE_TESTENV=1 is set, in which case the test fails.
//
// The binaries are looked up in PATH (redis-server, redis-cli, etcd) and in
// the repository's bin/ directory (kube-apiserver); MESHRELAY_REDIS_SERVER,
// MESHRELAY_REDIS_CLI, MESHRELAY_ETCD, MESHRELAY_KUBE_APISERVER and MESHRELAY_CHROMIUM override
// the paths.
package testenv
