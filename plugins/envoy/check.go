package envoy

import (
	"errors"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/meshrelay/meshrelay/api/xds"
)

// CheckNode checks one node group's resources as its consumers need them:
// they form a consistent go-control-plane snapshot (every
// ClusterLoadAssignment and RDS RouteConfiguration referenced, every
// reference present), and, for gRPC xDS clients, every HTTP connection
// manager ends with the Router filter and carries its routes inline in an
// api_listener, every EDS Cluster balances ROUND_ROBIN, and every locality
// has a load balancing weight of at least 1; a socket Listener (of an Envoy
// node group, or inbound) has an HTTP connection manager or ends with a TCP
// proxy. It returns every problem found.
func CheckNode(rs []xds.Resource) error {
	byType := map[string][]types.Resource{}
	var errs []error
	for _, r := range rs {
		byType[r.TypeURL] = append(byType[r.TypeURL], r.Message.(types.Resource))
		switch m := r.Message.(type) {
		case *listenerv3.Listener:
			errs = append(errs, checkListener(m)...)
		case *clusterv3.Cluster:
			if m.GetType() == clusterv3.Cluster_EDS && m.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
				errs = append(errs, fmt.Errorf("cluster %q: lb policy %s, want ROUND_ROBIN", m.GetName(), m.GetLbPolicy()))
			}
		case *endpointv3.ClusterLoadAssignment:
			for i, l := range m.GetEndpoints() {
				if l.GetLoadBalancingWeight().GetValue() < 1 {
					errs = append(errs, fmt.Errorf("cluster load assignment %q: locality %d has no load balancing weight", m.GetClusterName(), i))
				}
			}
		}
	}
	snap, err := cachev3.NewSnapshot("check", byType)
	if err != nil {
		return err
	}
	if err := snap.Consistent(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func checkListener(l *listenerv3.Listener) []error {
	var errs []error
	var managers []*hcmv3.HttpConnectionManager
	if api := l.GetApiListener().GetApiListener(); api != nil {
		hcm := &hcmv3.HttpConnectionManager{}
		if err := api.UnmarshalTo(hcm); err != nil {
			return []error{fmt.Errorf("listener %q: api_listener: %w", l.GetName(), err)}
		}
		if hcm.GetRouteConfig() == nil {
			errs = append(errs, fmt.Errorf("listener %q: api_listener routes are not inline", l.GetName()))
		}
		managers = append(managers, hcm)
	}
	tcpProxies := 0
	for _, fc := range l.GetFilterChains() {
		fs := fc.GetFilters()
		for i, f := range fs {
			if hcm := resourcev3.GetHTTPConnectionManager(f); hcm != nil {
				managers = append(managers, hcm)
			}
			if f.GetName() == TCPProxyFilter {
				tcpProxies++
				if i != len(fs)-1 {
					errs = append(errs, fmt.Errorf("listener %q: the tcp proxy is not the last network filter", l.GetName()))
				}
			}
		}
	}
	if len(managers) == 0 && tcpProxies == 0 {
		errs = append(errs, fmt.Errorf("listener %q has neither an http connection manager nor a tcp proxy", l.GetName()))
	}
	for _, hcm := range managers {
		fs := hcm.GetHttpFilters()
		if len(fs) == 0 || fs[len(fs)-1].GetName() != RouterFilter {
			errs = append(errs, fmt.Errorf("listener %q: the last http filter is not the router", l.GetName()))
		}
	}
	return errs
}
