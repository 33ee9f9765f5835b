package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/meshrelay/meshrelay/core/store"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxClusterLabels bounds the labels of one registered cluster. With
// Kubernetes' bounds on a label's key (317 bytes) and value (63 bytes),
// a cluster's labels stay under 25 KiB, inside an admin call's message.
const MaxClusterLabels = 64

// changeLabels returns labels with set applied and the keys of remove
// deleted, or an error naming the first key or value that is not a
// Kubernetes label key or value, a key both set and removed, or a result
// over MaxClusterLabels.
func changeLabels(labels, set map[string]string, remove []string) (map[string]string, error) {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label key %q: %s", k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(set[k]); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %q value %q: %s", k, set[k], strings.Join(msgs, "; ")))
		}
	}
	for _, k := range remove {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label key %q: %s", k, strings.Join(msgs, "; ")))
		}
		if _, ok := set[k]; ok {
			errs = append(errs, fmt.Errorf("label %q is both set and removed", k))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, set)
	for _, k := range remove {
		delete(out, k)
	}
	if len(out) > MaxClusterLabels {
		return nil, fmt.Errorf("%d labels: a cluster has at most %d", len(out), MaxClusterLabels)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// LabelCluster sets and removes labels of a registered cluster, by
// compare-and-set on its registry record.
func (a *admin) LabelCluster(ctx context.Context, req *relayv1.LabelClusterRequest) (*relayv1.ClusterStatus, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	if len(req.GetSet())+len(req.GetRemove()) > 2*MaxClusterLabels {
		return nil, status.Errorf(codes.InvalidArgument, "label cluster %q: more than %d changes", req.GetCluster(), 2*MaxClusterLabels)
	}
	if _, err := changeLabels(nil, req.GetSet(), req.GetRemove()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "label cluster %q: %v", req.GetCluster(), err)
	}
	var invalid error
	c, err := store.UpdateCluster(ctx, a.s.deps.Store, req.GetCluster(), func(c *store.Cluster, found bool) error {
		if !found || c.Revoked {
			return store.ErrNotFound
		}
		labels, err := changeLabels(c.Labels, req.GetSet(), req.GetRemove())
		if err != nil {
			invalid = err
			return err
		}
		c.Labels = labels
		return nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "cluster %q is not registered", req.GetCluster())
	case invalid != nil:
		return nil, status.Errorf(codes.InvalidArgument, "label cluster %q: %v", req.GetCluster(), invalid)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "label cluster %q: %v", req.GetCluster(), err)
	}
	a.s.log.Info("cluster labels changed", "cluster", c.Name, "labels", c.Labels, "version", c.Version)
	a.s.setLabels(c.Name, c.Labels)
	return &relayv1.ClusterStatus{Name: c.Name, Labels: c.Labels, RegistryVersion: c.Version}, nil
}
