package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/core/catalog"
	"github.com/meshrelay/meshrelay/core/store"
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
// time and makes the destination hold it: with Prune, exactly it, so that
// objects of clusters that left are deleted.
//
// Replicas sharing a store take turns: only the holder of the store's
// discovery lease calls Write (see writeDiscovery).
type DiscoveryWriter interface {
	Write(ctx context.Context, req DiscoveryWrite) error
}

// DiscoveryWrite is what Write is asked to write.
type DiscoveryWrite struct {
	// Fleet holds every cluster's discovery objects as this replica knows
	// them.
	Fleet *catalog.Fleet
	// Prune allows deleting the objects of clusters Fleet lacks. It is
	// false while the replica is still loading its fleet (in safe mode),
	// when a cluster it lacks may only be one it has not read yet.
	Prune bool
	// Reread asks the writer to read what the destination holds rather
	// than trust what it wrote before: the replica has just taken its
	// turn, and others wrote meanwhile.
	Reread bool
}

// DiscoveryLeaser is an optional capability of a DiscoveryWriter: the
// length of the replicas' turns to write (see writeDiscovery); those
// without it get DefaultDiscoveryLease.
type DiscoveryLeaser interface {
	LeaseTTL() time.Duration
}

// DefaultDiscoveryLease is how long a replica's turn to write the
// discovery objects lasts unless it renews it: when the replica writing
// them dies, another takes over within it.
const DefaultDiscoveryLease = 15 * time.Second

// discoveryLease names the store lease whose holder writes the discovery
// objects.
const discoveryLease = "discovery-writer"

// discoveryResync is how often the discovery objects are written even
// when nothing changed, to undo edits and deletions made by others.
const discoveryResync = time.Minute

// discoveryTurn is this replica's turn at writing the discovery objects:
// the store lease (store.Leases) it holds, or tries to take, under a name
// of its own process, so that a replica restarted under the same ID waits
// for its predecessor's lease to end.
type discoveryTurn struct {
	leases store.Leases
	holder string
	ttl    time.Duration
	log    *slog.Logger

	mu       sync.Mutex
	expires  time.Time // of the lease this replica holds; zero when none
	attempts int       // calls of take, for tests
}

// take acquires or renews the lease and reports whether this replica holds
// it, and whether it has just taken it. While the store cannot be reached
// a holder keeps its turn until its lease's time, which the store ends no
// sooner, and then stops.
func (t *discoveryTurn) take(ctx context.Context) (held, gained bool) {
	now := time.Now()
	l, err := t.leases.AcquireLease(ctx, discoveryLease, t.holder, t.ttl)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.attempts++
	was := !t.expires.IsZero() && now.Before(t.expires)
	switch {
	case err != nil:
		if was {
			t.log.Warn("renew the discovery writer's lease; writing until it ends", "expires", t.expires, "error", err)
			return true, false
		}
		t.expires = time.Time{}
		return false, false
	case l.Holder == t.holder:
		t.expires = l.Expires
		if !was {
			t.log.Info("took the turn to write the discovery objects", "lease", t.ttl)
		}
		return true, !was
	default:
		if was {
			t.log.Warn("lost the turn to write the discovery objects", "holder", l.Holder)
		}
		t.expires = time.Time{}
		return false, false
	}
}

// until returns when this replica's turn ends.
func (t *discoveryTurn) until() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expires
}

// release ends this replica's turn, so that another takes over at once.
func (t *discoveryTurn) release() {
	t.mu.Lock()
	held := !t.expires.IsZero()
	t.expires = time.Time{}
	t.mu.Unlock()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.leases.ReleaseLease(ctx, discoveryLease, t.holder); err != nil {
		t.log.Warn("release the discovery writer's lease; another replica takes over when it ends", "error", err)
	}
}

// writeDiscovery writes the discovery objects after each translation
// cycle that may have changed them, and every discoveryResync, while this
// replica holds the discovery lease: replicas sharing a store write one at
// a time, so that none deletes what another has just written from a fleet
// it has not read yet. It renews the lease every third of its time and,
// on taking it, reads the destination anew.
func (s *Server) writeDiscovery(ctx context.Context) error {
	ttl := DefaultDiscoveryLease
	if l, ok := s.deps.Discovery.(DiscoveryLeaser); ok && l.LeaseTTL() > 0 {
		ttl = l.LeaseTTL()
	}
	turn := s.discoveryTurn(ttl)
	defer turn.release()
	renew := time.NewTicker(ttl / 3)
	defer renew.Stop()
	resync := time.NewTicker(discoveryResync)
	defer resync.Stop()
	for first := true; ; first = false {
		renewing := false
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-s.discoveryKick:
			case <-resync.C:
			case <-renew.C:
				renewing = true
			}
		}
		held, gained := turn.take(ctx)
		if !held || (renewing && !gained) {
			continue
		}
		wctx, cancel := context.WithDeadline(ctx, turn.until())
		err := s.deps.Discovery.Write(wctx, DiscoveryWrite{Fleet: s.Catalog(), Prune: s.pruneAllowed(), Reread: gained})
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("write discovery objects; retrying at the next change or resync", "error", err)
		}
	}
}

// discoveryTurn returns the replica's turn at writing the discovery
// objects, made on first use.
func (s *Server) discoveryTurn(ttl time.Duration) *discoveryTurn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn == nil {
		s.turn = &discoveryTurn{leases: s.deps.Store, holder: s.opts.ServerID + "/" + randomSuffix(), ttl: ttl, log: s.log}
	}
	return s.turn
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
// after an error, or when asked to Reread); in between it compares the
// fleet with what it wrote, so a cycle that changed no discovery object
// costs nothing.
type KubeDiscovery struct {
	client    dynamic.Interface
	namespace string
	leaseTTL  time.Duration
	log       *slog.Logger

	// Write runs on one goroutine at a time; these are its memory.
	last    *catalog.Fleet // written with Prune
	listed  time.Time
	written map[string]map[string]string // kind → name → hash annotation
}

// KubeDiscoveryOptions configures a KubeDiscovery.
type KubeDiscoveryOptions struct {
	// Namespace receives the custom resources.
	Namespace string
	// LeaseTTL is how long a replica's turn to write lasts unless renewed
	// (see DiscoveryLeaser); DefaultDiscoveryLease when zero.
	LeaseTTL time.Duration
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

// NewKubeDiscovery returns a writer into the namespace of the cluster cfg
// reaches. The CRDs of deploy/crds must be installed there.
func NewKubeDiscovery(cfg *rest.Config, opts KubeDiscoveryOptions) (*KubeDiscovery, error) {
	if errs := validation.IsDNS1123Label(opts.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("discovery namespace %q: %s", opts.Namespace, strings.Join(errs, "; "))
	}
	if opts.LeaseTTL < 0 || (opts.LeaseTTL > 0 && opts.LeaseTTL < 100*time.Millisecond) {
		return nil, fmt.Errorf("discovery lease %s: want at least 100ms", opts.LeaseTTL)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube discovery writer: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &KubeDiscovery{client: client, namespace: opts.Namespace, leaseTTL: cmp.Or(opts.LeaseTTL, DefaultDiscoveryLease), log: opts.Logger}, nil
}

// LeaseTTL implements DiscoveryLeaser.
func (k *KubeDiscovery) LeaseTTL() time.Duration { return k.leaseTTL }

// Write applies every object of the fleet whose content changed and, with
// Prune, deletes the objects it manages that the fleet no longer has.
func (k *KubeDiscovery) Write(ctx context.Context, req DiscoveryWrite) error {
	fleet := req.Fleet
	resync := req.Reread || k.written == nil || time.Since(k.listed) >= discoveryResync
	if req.Prune && fleet == k.last && !resync {
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
		for _, sp := range c.Workloads {
			k.add(desired, "Workload", sp, crName(sp.Name, strings.ToLower(sp.Kind), sp.Namespace, c.Name), c.Name, sp.Namespace, sp.Name)
		}
		for _, sp := range c.Destinations {
			k.add(desired, "Destination", sp, crName(sp.Name, sp.Namespace, c.Name), c.Name, sp.Namespace, sp.Name)
		}
	}
	var errs []error
	for kind, gvr := range discoveryKinds {
		if err := k.sync(ctx, kind, gvr, desired[kind], req.Prune); err != nil {
			errs = append(errs, err)
		}
	}
	k.last = nil
	if len(errs) > 0 {
		k.written = nil // list again next time
		return errors.Join(errs...)
	}
	if req.Prune {
		k.last = fleet
	}
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

// sync makes the namespace hold the desired objects of one kind and, with
// prune, only them, as far as what it wrote tells.
func (k *KubeDiscovery) sync(ctx context.Context, kind string, gvr schema.GroupVersionResource, desired map[string]*unstructured.Unstructured, prune bool) error {
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
		if _, ok := desired[name]; ok || !prune {
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
