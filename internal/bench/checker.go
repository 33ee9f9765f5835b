package bench

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/manifest"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/internal/offline"
)

// checker is the chaos soak's independent judge: it never asks a server.
// It keeps the fleet's inputs and policies as the soak sets them and
// translates them offline ([offline.Model], with plugins of its own) into
// what every cluster's outputs must be, and compares that with what each
// simulated agent's sink holds. Every policy set the soak wrote is kept as
// a revision, named by its hash as a server's staged rollout names it, so
// that a cluster can be judged under the revision its rollout stage is on
// (expectedOn). It is safe for concurrent use.
type checker struct {
	mu    sync.Mutex
	model *offline.Model
	// revisions are the policy sets written, by hash; current is the last.
	revisions map[string][]snapshot.Resource
	current   string
	// onModel is the revision the model holds; outputs caches each
	// revision's outputs until an input changes.
	onModel string
	outputs map[string]map[string]map[string]*snapshot.Snapshot
}

func newChecker(translators []pluginhost.Translator, logger *slog.Logger) *checker {
	return &checker{model: offline.NewModel(translators, logger), revisions: map[string][]snapshot.Resource{}, outputs: map[string]map[string]map[string]*snapshot.Snapshot{}}
}

// setInput records cluster's inputs.
func (c *checker) setInput(cluster string, s *snapshot.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.model.SetInput(cluster, s)
	clear(c.outputs)
}

// setPoliciesDir records the policies in dir, read as a server's dir:
// policy source reads them, as the current revision, and returns its
// hash: that of the policies a server translates (the policy API group
// less the RolloutStrategy and MeshTrusts, which the rollout and the
// trust manager take).
func (c *checker) setPoliciesDir(dir string) (string, error) {
	s, err := manifest.NewDir(dir, manifest.Options{}).Snapshot()
	if err != nil {
		return "", fmt.Errorf("checker: read policies: %w", err)
	}
	var rs []snapshot.Resource
	for r := range s.All() {
		if r.ID.Group == policyv1alpha1.GroupName && r.ID.Kind != policyv1alpha1.KindRolloutStrategy && r.ID.Kind != policyv1alpha1.KindMeshTrust {
			rs = append(rs, r)
		}
	}
	rev, err := snapshot.New(0, rs)
	if err != nil {
		return "", fmt.Errorf("checker: read policies: %w", err)
	}
	h := rev.Hash().String()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revisions[h], c.current = rs, h
	return h, nil
}

// currentRevision returns the hash of the policies last set.
func (c *checker) currentRevision() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// expected returns every cluster's outputs under the current policies.
func (c *checker) expected(ctx context.Context) (map[string]map[string]*snapshot.Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outputsUnder(ctx, c.current)
}

// expectedOn returns every cluster's outputs under the revision p puts it
// on: each cluster's from its own revision's translation of the whole
// fleet, as a server with two live revisions computes them. An error
// names a revision the soak never wrote, or a translator that failed.
func (c *checker) expectedOn(ctx context.Context, p placement) (map[string]map[string]*snapshot.Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string]map[string]*snapshot.Snapshot{}
	for _, h := range p.revisions() {
		outs, err := c.outputsUnder(ctx, h)
		if err != nil {
			return nil, err
		}
		for cluster, o := range outs {
			if p.revisionOf(cluster) == h {
				want[cluster] = o
			}
		}
	}
	return want, nil
}

// outputsUnder translates the fleet under revision h, unless cached, and
// returns every cluster's outputs by backend, empty ones left out. The
// caller holds c.mu.
func (c *checker) outputsUnder(ctx context.Context, h string) (map[string]map[string]*snapshot.Snapshot, error) {
	if want, ok := c.outputs[h]; ok {
		return want, nil
	}
	policies, ok := c.revisions[h]
	if !ok {
		return nil, fmt.Errorf("checker: revision %s is none of the %d policy sets the soak wrote", short(h), len(c.revisions))
	}
	if c.onModel != h {
		if err := c.model.SetPolicies(policies); err != nil {
			return nil, fmt.Errorf("checker: revision %s: %w", short(h), err)
		}
		c.onModel = h
	}
	res := c.model.Translate(ctx)
	if len(res.Failed) > 0 {
		return nil, fmt.Errorf("checker: translator %s failed: %s", res.Failed[0].Name, res.Failed[0].Error)
	}
	want := map[string]map[string]*snapshot.Snapshot{}
	for k, s := range res.Outputs {
		if s.Len() == 0 {
			continue
		}
		if want[k.Cluster] == nil {
			want[k.Cluster] = map[string]*snapshot.Snapshot{}
		}
		want[k.Cluster][k.Backend] = s
	}
	c.outputs[h] = want
	return want, nil
}

// short returns a revision hash's first twelve digits, as logs show it.
func short(h string) string { return h[:min(len(h), 12)] }

// placement is which revision each cluster must hold, as the fleet's
// rollout record says: outside a rollout every cluster holds live; during
// one (Progressing or Paused) the clusters not released (onPrevious) hold
// from and every other holds to.
type placement struct {
	live       string
	active     bool
	from, to   string
	onPrevious map[string]bool
}

// revisions returns the revisions clusters are on.
func (p placement) revisions() []string {
	if p.active {
		return []string{p.from, p.to}
	}
	return []string{p.live}
}

// revisionOf returns the revision cluster must hold.
func (p placement) revisionOf(cluster string) string {
	switch {
	case !p.active:
		return p.live
	case p.onPrevious[cluster]:
		return p.from
	}
	return p.to
}

// Difference is how one cluster's outputs, as its agent holds them, differ
// from the model's.
type Difference struct {
	Cluster string `json:"cluster"`
	// Missing resources are in the model, not at the agent; Stale ones are
	// at both with other content: both are lost updates. Extra ones are at
	// the agent only.
	Missing []string `json:"missing,omitempty"`
	Stale   []string `json:"stale,omitempty"`
	Extra   []string `json:"extra,omitempty"`
}

// Empty reports whether the outputs agree.
func (d Difference) Empty() bool { return len(d.Missing)+len(d.Stale)+len(d.Extra) == 0 }

// maxNamed bounds the resources a Difference names.
const maxNamed = 5

// compareOutputs compares held with want for one cluster, backend by
// backend.
func compareOutputs(cluster string, want, held map[string]*snapshot.Snapshot) Difference {
	d := Difference{Cluster: cluster}
	name := func(list *[]string, backend string, id snapshot.ID) {
		if len(*list) < maxNamed {
			*list = append(*list, backend+": "+id.String())
		}
	}
	for backend, w := range want {
		h := held[backend]
		if h != nil && h.Hash() == w.Hash() {
			continue
		}
		for r := range w.All() {
			var got snapshot.Resource
			ok := false
			if h != nil {
				got, ok = h.Get(r.ID)
			}
			switch {
			case !ok:
				name(&d.Missing, backend, r.ID)
			case string(got.Body) != string(r.Body):
				name(&d.Stale, backend, r.ID)
			}
		}
	}
	for backend, h := range held {
		w := want[backend]
		for r := range h.All() {
			if w == nil {
				name(&d.Extra, backend, r.ID)
				continue
			}
			if _, ok := w.Get(r.ID); !ok {
				name(&d.Extra, backend, r.ID)
			}
		}
	}
	return d
}

// Markers the soak's changes leave in outputs; each only ever grows.
var (
	inputMarker    = regexp.MustCompile(`"m([0-9]+)x"`)
	policyMarker   = regexp.MustCompile(`/p([0-9]+)/\*`)
	endpointMarker = regexp.MustCompile(`"100\.([0-9]+)\.([0-9]+)\.([0-9]+)"`)
)

// outputAudit watches one agent's sink for what the checker can only see
// as it happens: outputs going backwards (a resource carrying an older
// change than it carried before) and deletions made with pruning allowed,
// which the next check judges against the model. It is guarded by the
// sim's lock.
type outputAudit struct {
	cluster   string
	marks     map[markKey]int
	deletions []Deletion
	dropped   int // deletions beyond maxDeletions
	backwards []Backwards
}

type markKey struct {
	backend string
	id      snapshot.ID
	kind    string
}

// Deletion is a resource an agent's sink pruned.
type Deletion struct {
	Cluster string      `json:"cluster"`
	Backend string      `json:"backend"`
	ID      string      `json:"resource"`
	At      time.Time   `json:"at"`
	id      snapshot.ID // ID's source
}

// Backwards is an output that went back to an older change.
type Backwards struct {
	Cluster string    `json:"cluster"`
	Backend string    `json:"backend"`
	ID      string    `json:"resource"`
	Marker  string    `json:"marker"`
	Had     int       `json:"had"`
	Got     int       `json:"got"`
	At      time.Time `json:"at"`
}

// maxDeletions bounds the deletions an audit keeps between two checks.
const maxDeletions = 10000

func newOutputAudit(cluster string) *outputAudit {
	return &outputAudit{cluster: cluster, marks: map[markKey]int{}}
}

// observe audits the delta a sink applied to backend at now.
func (a *outputAudit) observe(backend string, d snapshot.Delta, now time.Time) {
	for _, id := range d.Deletes {
		if len(a.deletions) >= maxDeletions {
			a.dropped++
			continue
		}
		a.deletions = append(a.deletions, Deletion{Cluster: a.cluster, Backend: backend, ID: id.String(), At: now, id: id})
	}
	for _, r := range d.Upserts {
		for kind, v := range markersOf(r.Body) {
			k := markKey{backend, r.ID, kind}
			if had, ok := a.marks[k]; ok && v < had {
				a.backwards = append(a.backwards, Backwards{
					Cluster: a.cluster, Backend: backend, ID: r.ID.String(), Marker: kind, Had: had, Got: v, At: now,
				})
				continue
			}
			a.marks[k] = v
		}
	}
}

// take returns and clears the deletions and backwards outputs seen since
// the last call.
func (a *outputAudit) take() (deletions []Deletion, dropped int, backwards []Backwards) {
	deletions, dropped, backwards = a.deletions, a.dropped, a.backwards
	a.deletions, a.dropped, a.backwards = nil, 0, nil
	return deletions, dropped, backwards
}

// markersOf returns the highest marker of each kind in body: the input
// change (m<seq>x), the policy edit (/p<k>/*) and the endpoint change
// (100.x.y.z, see EndpointAddress).
func markersOf(body []byte) map[string]int {
	out := map[string]int{}
	highest := func(kind string, v int) {
		if cur, ok := out[kind]; !ok || v > cur {
			out[kind] = v
		}
	}
	for _, m := range inputMarker.FindAllSubmatch(body, -1) {
		if v, err := strconv.Atoi(string(m[1])); err == nil {
			highest("input", v)
		}
	}
	for _, m := range policyMarker.FindAllSubmatch(body, -1) {
		if v, err := strconv.Atoi(string(m[1])); err == nil {
			highest("policy", v)
		}
	}
	for _, m := range endpointMarker.FindAllSubmatch(body, -1) {
		a, _ := strconv.Atoi(string(m[1]))
		b, _ := strconv.Atoi(string(m[2]))
		c, _ := strconv.Atoi(string(m[3]))
		if a >= 64 {
			highest("endpoint", (a-64)<<16|b<<8|c)
		}
	}
	return out
}

// wrongfulPrunes returns the deletions of resources the model holds: a
// prune during safe mode or from a partial view. The soak's changes never
// remove a resource from the model (they rewrite selectors, paths and
// addresses, not names), so any such deletion is wrong.
func wrongfulPrunes(deletions []Deletion, want map[string]map[string]*snapshot.Snapshot) []Deletion {
	var out []Deletion
	for _, d := range deletions {
		if w := want[d.Cluster][d.Backend]; w != nil {
			if _, ok := w.Get(d.id); ok {
				out = append(out, d)
			}
		}
	}
	return out
}
