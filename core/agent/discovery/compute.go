package discovery

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// Labels and names discovery recognizes.
const (
	// NetworkLabel is Istio's network label, on a Namespace or a gateway
	// Service.
	NetworkLabel = "topology.istio.io/network"
	// GatewayPort is Istio's cross-network mTLS passthrough port.
	GatewayPort = 15443
	// DefaultTrustDomain is Istio's trust domain unless configured.
	DefaultTrustDomain = "cluster.local"
	// CiliumConfigMap is Cilium's configuration, in the namespace of its
	// agents; CiliumEnvoyConfigKey in it turns CiliumEnvoyConfig on.
	CiliumConfigMap      = "cilium-config"
	CiliumEnvoyConfigKey = "enable-envoy-config"
)

// workload is the part of a Deployment, StatefulSet, DaemonSet or ReplicaSet
// that Compute reads.
type workload struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Template struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Containers []struct {
					Name  string `json:"name"`
					Image string `json:"image"`
					Env   []struct {
						Name  string `json:"name"`
						Value string `json:"value"`
					} `json:"env"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// service is the part of a Service that Compute reads.
type service struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Type        string            `json:"type"`
		Selector    map[string]string `json:"selector"`
		ExternalIPs []string          `json:"externalIPs"`
		Ports       []struct {
			Name string `json:"name"`
			Port int32  `json:"port"`
		} `json:"ports"`
	} `json:"spec"`
	Status struct {
		LoadBalancer struct {
			Ingress []struct {
				IP       string `json:"ip"`
				Hostname string `json:"hostname"`
			} `json:"ingress"`
		} `json:"loadBalancer"`
	} `json:"status"`
}

// Compute derives the internal discovery.meshrelay.io resources from a
// cluster's objects:
//
//   - Mesh "istio" when an istiod Deployment exists: its namespace, version
//     (image tag), trust domain (TRUST_DOMAIN or cluster.local) and network
//     (label topology.istio.io/network on istiod's Namespace);
//   - Mesh "cilium" when a cilium DaemonSet or cilium-operator Deployment
//     exists, with envoyConfig when the cilium-config ConfigMap in its
//     namespace sets enable-envoy-config to "true";
//   - Mesh "envoy" when workloads carry meshrelay.io/envoy-node, listing
//     the label's values sorted and unique, and, for the node groups whose
//     workloads label meshrelay.io/envoy-proxy "envoy" or "grpc" in the
//     same place (pod template, else the workload), that value in
//     envoyProxies — "envoy" when the group's workloads disagree;
//   - Mesh "linkerd" when a linkerd-destination Deployment exists
//     (detectLinkerd);
//   - a Gateway per east-west gateway Service (label istio=eastwestgateway,
//     or a LoadBalancer Service labelled topology.istio.io/network), with
//     its load-balancer addresses (else its external IPs), its
//     cross-network port and its selector (the gateway pods' labels).
//
// Objects that cannot be decoded are ignored. The result is sorted by ID.
// Compute skips the bodies of objects that cannot matter, so it costs little
// on large clusters.
func Compute(objects []snapshot.Resource) []snapshot.Resource {
	var (
		istiod, ciliumDS, ciliumOp *workload
		envoyNodes                 []string
		envoyProxies               map[string]string
		gateways                   []service
		namespaces                 = map[string]map[string]string{}
		envoyConfig                = map[string]bool{}
	)
	for _, r := range objects {
		id := r.ID
		switch {
		case id.Group == "apps" && workloadKinds[id.Kind]:
			if !bytes.Contains(r.Body, []byte("istiod")) && !bytes.Contains(r.Body, []byte("cilium")) &&
				!bytes.Contains(r.Body, []byte(discoveryv1alpha1.EnvoyNodeLabel)) {
				continue
			}
			var w workload
			if err := json.Unmarshal(r.Body, &w); err != nil {
				continue
			}
			for _, labels := range []map[string]string{w.Spec.Template.Metadata.Labels, w.Metadata.Labels} {
				v := labels[discoveryv1alpha1.EnvoyNodeLabel]
				if v == "" {
					continue
				}
				envoyNodes = append(envoyNodes, v)
				switch p := labels[discoveryv1alpha1.EnvoyProxyLabel]; p {
				case discoveryv1alpha1.EnvoyProxyEnvoy, discoveryv1alpha1.EnvoyProxyGRPC:
					if envoyProxies == nil {
						envoyProxies = map[string]string{}
					}
					if envoyProxies[v] != discoveryv1alpha1.EnvoyProxyEnvoy {
						envoyProxies[v] = p
					}
				}
				break
			}
			switch {
			case id.Kind == "Deployment" && isIstiod(&w):
				if istiod == nil || preferIstiod(&w, istiod) {
					istiod = &w
				}
			case id.Kind == "DaemonSet" && (w.Metadata.Name == "cilium" || w.Metadata.Labels["k8s-app"] == "cilium"):
				if ciliumDS == nil {
					ciliumDS = &w
				}
			case id.Kind == "Deployment" && (w.Metadata.Name == "cilium-operator" || w.Metadata.Labels["io.cilium/app"] == "operator"):
				if ciliumOp == nil {
					ciliumOp = &w
				}
			}
		case id.Group == "" && id.Kind == "Service":
			if !bytes.Contains(r.Body, []byte("eastwestgateway")) && !bytes.Contains(r.Body, []byte(NetworkLabel)) {
				continue
			}
			var s service
			if err := json.Unmarshal(r.Body, &s); err != nil {
				continue
			}
			if s.Metadata.Labels["istio"] == "eastwestgateway" ||
				(s.Spec.Type == "LoadBalancer" && s.Metadata.Labels[NetworkLabel] != "") {
				gateways = append(gateways, s)
			}
		case derivedOnly(id):
			var cm struct {
				Data map[string]string `json:"data"`
			}
			if err := json.Unmarshal(r.Body, &cm); err != nil {
				continue
			}
			envoyConfig[id.Namespace] = cm.Data[CiliumEnvoyConfigKey] == "true"
		case id.Group == "" && id.Kind == "Namespace":
			if !bytes.Contains(r.Body, []byte(NetworkLabel)) {
				continue
			}
			var ns struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			if err := json.Unmarshal(r.Body, &ns); err != nil {
				continue
			}
			namespaces[ns.Metadata.Name] = ns.Metadata.Labels
		}
	}

	var out []snapshot.Resource
	add := func(obj any) {
		body, err := json.Marshal(obj)
		if err != nil {
			return
		}
		r, err := snapshot.FromJSON(body)
		if err != nil {
			return
		}
		out = append(out, r)
	}
	meshNetwork := ""
	if istiod != nil {
		ns := istiod.Metadata.Namespace
		meshNetwork = namespaces[ns][NetworkLabel]
		image, env := mainContainer(istiod, "discovery")
		trust := env["TRUST_DOMAIN"]
		if trust == "" {
			trust = DefaultTrustDomain
		}
		add(discoveryv1alpha1.Mesh{
			TypeMeta:   metav1.TypeMeta{APIVersion: discoveryv1alpha1.APIVersion, Kind: "Mesh"},
			ObjectMeta: metav1.ObjectMeta{Name: discoveryv1alpha1.MeshIstio},
			Spec: discoveryv1alpha1.MeshSpec{
				Type: discoveryv1alpha1.MeshIstio, Namespace: ns, Version: imageVersion(image),
				TrustDomain: trust, Network: meshNetwork,
			},
		})
	}
	if c := cmp.Or(ciliumDS, ciliumOp); c != nil {
		image, _ := mainContainer(c, "cilium-agent")
		add(discoveryv1alpha1.Mesh{
			TypeMeta:   metav1.TypeMeta{APIVersion: discoveryv1alpha1.APIVersion, Kind: "Mesh"},
			ObjectMeta: metav1.ObjectMeta{Name: discoveryv1alpha1.MeshCilium},
			Spec: discoveryv1alpha1.MeshSpec{
				Type: discoveryv1alpha1.MeshCilium, Namespace: c.Metadata.Namespace, Version: imageVersion(image),
				EnvoyConfig: envoyConfig[c.Metadata.Namespace],
			},
		})
	}
	if len(envoyNodes) > 0 {
		slices.Sort(envoyNodes)
		add(discoveryv1alpha1.Mesh{
			TypeMeta:   metav1.TypeMeta{APIVersion: discoveryv1alpha1.APIVersion, Kind: "Mesh"},
			ObjectMeta: metav1.ObjectMeta{Name: discoveryv1alpha1.MeshEnvoy},
			Spec: discoveryv1alpha1.MeshSpec{
				Type: discoveryv1alpha1.MeshEnvoy, EnvoyNodes: slices.Compact(envoyNodes), EnvoyProxies: envoyProxies,
			},
		})
	}
	if m, ok := detectLinkerd(objects); ok {
		add(m)
	}
	// The server refuses an input with more Gateways or an invalid one (an
	// address that is not an IP or a DNS name, say): a Service in a
	// directory of YAML can hold anything.
	n := 0
	for _, s := range gateways {
		network := cmp.Or(s.Metadata.Labels[NetworkLabel], namespaces[s.Metadata.Namespace][NetworkLabel], meshNetwork)
		g := discoveryv1alpha1.Gateway{
			TypeMeta:   metav1.TypeMeta{APIVersion: discoveryv1alpha1.APIVersion, Kind: "Gateway"},
			ObjectMeta: metav1.ObjectMeta{Name: s.Metadata.Name, Namespace: s.Metadata.Namespace},
			Spec: discoveryv1alpha1.GatewaySpec{
				Mesh:      discoveryv1alpha1.MeshIstio,
				Addresses: gatewayAddresses(&s),
				Port:      gatewayPort(&s),
				Network:   network,
				Selector:  s.Spec.Selector,
			},
		}
		if n == discoveryv1alpha1.MaxGateways || len(g.Validate()) > 0 {
			continue
		}
		add(g)
		n++
	}
	slices.SortFunc(out, func(a, b snapshot.Resource) int { return a.ID.Compare(b.ID) })
	return out
}

// derivedOnly reports whether an object is read only for what Compute
// derives from it and is never an input itself: Cilium's cilium-config
// ConfigMap.
func derivedOnly(id snapshot.ID) bool {
	return id.Group == "" && id.Kind == "ConfigMap" && id.Name == CiliumConfigMap
}

// isIstiod reports whether a Deployment runs istiod (also revisioned, as
// istiod-1-24).
func isIstiod(w *workload) bool {
	return w.Metadata.Name == "istiod" || strings.HasPrefix(w.Metadata.Name, "istiod-") ||
		w.Metadata.Labels["app"] == "istiod"
}

// preferIstiod orders istiod candidates: the unrevisioned "istiod" first,
// then by namespace and name.
func preferIstiod(a, b *workload) bool {
	if (a.Metadata.Name == "istiod") != (b.Metadata.Name == "istiod") {
		return a.Metadata.Name == "istiod"
	}
	return cmp.Or(cmp.Compare(a.Metadata.Namespace, b.Metadata.Namespace), cmp.Compare(a.Metadata.Name, b.Metadata.Name)) < 0
}

// mainContainer returns the image and environment of the container called
// name, or of the first container.
func mainContainer(w *workload, name string) (string, map[string]string) {
	cs := w.Spec.Template.Spec.Containers
	if len(cs) == 0 {
		return "", nil
	}
	c := cs[0]
	for _, cc := range cs {
		if cc.Name == name {
			c = cc
			break
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return c.Image, env
}

// imageVersion returns an image's tag without digest or variant suffix:
// "docker.io/istio/pilot:1.24.0-distroless" gives "1.24.0",
// "quay.io/cilium/cilium:v1.16.1@sha256:…" gives "v1.16.1".
func imageVersion(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash {
		return ""
	}
	tag := image[colon+1:]
	for _, suffix := range []string{"-distroless", "-debug"} {
		tag = strings.TrimSuffix(tag, suffix)
	}
	return tag
}

// gatewayAddresses returns a gateway Service's load-balancer addresses, or
// its external IPs when it has none, unique and in order: those that are
// IPs or DNS names, at most discoveryv1alpha1.MaxGatewayAddresses.
func gatewayAddresses(s *service) []string {
	addrs := []string{}
	add := func(a string) {
		if a != "" && !slices.Contains(addrs, a) && len(addrs) < discoveryv1alpha1.MaxGatewayAddresses &&
			len(discoveryv1alpha1.ValidateAddress(field.NewPath("address"), a)) == 0 {
			addrs = append(addrs, a)
		}
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		add(cmp.Or(in.IP, in.Hostname))
	}
	if len(addrs) == 0 {
		for _, a := range s.Spec.ExternalIPs {
			add(a)
		}
	}
	return addrs
}

// gatewayPort returns a gateway Service's cross-network port: 15443 when it
// exposes it, else the port named tls-istio-mtls or tls, else 15443.
func gatewayPort(s *service) int32 {
	byName := map[string]int32{}
	for _, p := range s.Spec.Ports {
		if p.Port == GatewayPort {
			return GatewayPort
		}
		byName[p.Name] = p.Port
	}
	if p, ok := byName["tls-istio-mtls"]; ok {
		return p
	}
	if p, ok := byName["tls"]; ok {
		return p
	}
	return GatewayPort
}

// assemble builds a snapshot from discovered objects: the kept ones plus
// what Compute derives from all of them.
func assemble(version uint64, kept, all []snapshot.Resource) (*snapshot.Snapshot, error) {
	rs := append(slices.Clip(kept), Compute(all)...)
	s, err := snapshot.New(version, rs)
	if err != nil {
		return nil, fmt.Errorf("build snapshot: %w", err)
	}
	return s, nil
}
