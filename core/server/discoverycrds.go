package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/core/catalog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// DiscoveryWriter writes the fleet's discovery objects where people read
// them, such as the management cluster. Write is given the whole fleet each
// time and makes the destination hold exactly it: objects of clusters that
// left are deleted.
type DiscoveryWriter interface {
	Write(ctx context.Context, fleet *catalog.Fleet) error
}

// discoveryResync is how often the discovery objects are written even
// when nothing changed, to undo edits and deletions made by others.
const discoveryResync = time.Minute

// writeDiscovery writes the discovery objects after each translation
// cycle that may have changed them, and every discoveryResync.
func (s *Server) writeDiscovery(ctx context.Context) error {
	tick := time.NewTicker(discoveryResync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.discoveryKick:
		case <-tick.C:
		}
		if err := s.deps.Discovery.Write(ctx, s.Catalog()); err != nil && ctx.Err() == nil {
			s.log.Warn("write discovery objects; retrying at the next change or resync", "error", err)
		}
	}
}

// kickDiscovery asks for the discovery objects to be written.
func (s *Server) kickDiscovery() {
	select {
	case s.discoveryKick <- struct{}{}:
	default:
	}
}

// Labels and names of the discovery objects in the management cluster.
const (
	managedByLabel  = meta.ManagedByLabel
	managedBy       = meta.ManagedByValue
	hashAnnotation  = "discovery.meshrelay.io/hash"
	discoveryFields = "meshrelay-discovery"
)

var discoveryKinds = map[string]schema.GroupVersionResource{
	"Mesh":        {Group: discoveryapi.Group, Version: discoveryapi.Version, Resource: "meshes"},
	"Workload":    {Group: discoveryapi.Group, Version: discoveryapi.Version, Resource: "workloads"},
	"Destination": {Group: discoveryapi.Group, Version: discoveryapi.Version, Resource: "destinations"},
}

// KubeDiscovery writes discovery objects as discovery.meshrelay.io custom
// resources into one namespace of the management cluster, with server-side
// apply. Names are made unique across the fleet ("reviews.bookinfo.west",
// "reviews-v1.deployment.bookinfo.west", "istio.west"); labels say the
// cluster, namespace and name the object describes.
//
// Write lists what the namespace holds only once per discoveryResync (and
// after an error); in between it compares the fleet with what it wrote, so
// a cycle that changed no discovery object costs nothing.
type KubeDiscovery struct {
	client    dynamic.Interface
	namespace string
	log       *slog.Logger

	// Write runs on one goroutine at a time; these are its memory.
	last    *catalog.Fleet
	listed  time.Time
	written map[string]map[string]string // kind → name → hash annotation
}

// NewKubeDiscovery returns a writer into namespace of the cluster cfg
// reaches. The CRDs of deploy/crds must be installed there.
func NewKubeDiscovery(cfg *rest.Config, namespace string, logger *slog.Logger) (*KubeDiscovery, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("discovery namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube discovery writer: %w", err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &KubeDiscovery{client: client, namespace: namespace, log: logger}, nil
}

// Write applies every object of the fleet whose content changed and deletes
// the objects it manages that the fleet no longer has.
func (k *KubeDiscovery) Write(ctx context.Context, fleet *catalog.Fleet) error {
	resync := k.written == nil || time.Since(k.listed) >= discoveryResync
	if fleet == k.last && !resync {
		return nil
	}
	if resync {
		if err := k.list(ctx); err != nil {
			return err
		}
	}
	desired := map[string]map[string]*unstructured.Unstructured{}
	for kind := range discoveryKinds {
		desired[kind] = map[string]*unstructured.Unstructured{}
	}
	for _, c := range fleet.Clusters {
		for _, m := range c.Meshes {
			k.add(desired, "Mesh", m.Spec, crName(m.Spec.Type, c.Name), c.Name, m.Spec.Namespace, m.Name)
		}
		for _, w := range c.Workloads {
			sp := w.Spec
			k.add(desired, "Workload", sp, crName(sp.Name, strings.ToLower(sp.Kind), sp.Namespace, c.Name), c.Name, sp.Namespace, sp.Name)
		}
		for _, d := range c.Destinations {
			sp := d.Spec
			k.add(desired, "Destination", sp, crName(sp.Name, sp.Namespace, c.Name), c.Name, sp.Namespace, sp.Name)
		}
	}
	var errs []error
	for kind, gvr := range discoveryKinds {
		if err := k.sync(ctx, kind, gvr, desired[kind]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		k.written, k.last = nil, nil // list again next time
		return errors.Join(errs...)
	}
	k.last = fleet
	return nil
}

// list learns what the namespace holds of the objects it manages.
func (k *KubeDiscovery) list(ctx context.Context) error {
	written := map[string]map[string]string{}
	for kind, gvr := range discoveryKinds {
		existing, err := k.client.Resource(gvr).Namespace(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: managedByLabel + "=" + managedBy + "," + discoveryapi.ClusterLabel})
		if err != nil {
			return fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		written[kind] = map[string]string{}
		for _, o := range existing.Items {
			written[kind][o.GetName()] = o.GetAnnotations()[hashAnnotation]
		}
	}
	k.written, k.listed = written, time.Now()
	return nil
}

// add builds one custom resource.
func (k *KubeDiscovery) add(desired map[string]map[string]*unstructured.Unstructured, kind string, spec any, name, cluster, namespace, objName string) {
	body, err := json.Marshal(spec)
	if err != nil {
		return
	}
	var specMap map[string]any
	if err := json.Unmarshal(body, &specMap); err != nil {
		return
	}
	sum := sha256.Sum256(body)
	labels := map[string]any{managedByLabel: managedBy, discoveryapi.ClusterLabel: cluster}
	for key, v := range map[string]string{discoveryapi.NamespaceLabel: namespace, discoveryapi.NameLabel: objName} {
		if v != "" && len(validation.IsValidLabelValue(v)) == 0 {
			labels[key] = v
		}
	}
	desired[kind][name] = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": discoveryapi.APIVersion, "kind": kind,
		"metadata": map[string]any{
			"name": name, "namespace": k.namespace, "labels": labels,
			"annotations": map[string]any{hashAnnotation: hex.EncodeToString(sum[:8])},
		},
		"spec": specMap,
	}}
}

// sync makes the namespace hold exactly the desired objects of one kind,
// as far as what it wrote tells.
func (k *KubeDiscovery) sync(ctx context.Context, kind string, gvr schema.GroupVersionResource, desired map[string]*unstructured.Unstructured) error {
	res := k.client.Resource(gvr).Namespace(k.namespace)
	have := k.written[kind]
	var errs []error
	force := true
	for name, obj := range desired {
		hash := obj.GetAnnotations()[hashAnnotation]
		if h, ok := have[name]; ok && h == hash {
			continue
		}
		data, err := json.Marshal(obj.Object)
		if err == nil {
			_, err = res.Patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: discoveryFields, Force: &force})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("apply %s %s/%s: %w", kind, k.namespace, name, err))
			continue
		}
		have[name] = hash
	}
	for name := range have {
		if _, ok := desired[name]; ok {
			continue
		}
		if err := res.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s/%s: %w", kind, k.namespace, name, err))
			continue
		}
		delete(have, name)
	}
	return errors.Join(errs...)
}

// crName joins the parts of a fleet-unique name with dots. A name longer
// than Kubernetes allows is cut and ends with a hash of the whole.
func crName(parts ...string) string {
	name := strings.Join(parts, ".")
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength-17], ".-") + "-" + hex.EncodeToString(sum[:8])
}
