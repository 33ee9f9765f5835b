package sdktest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/sdk"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Fixture is a fleet view: clusters with their inputs, and the policies of
// the management source.
type Fixture struct {
	Clusters []Cluster
	// Policies are the management source's policies, as JSON objects.
	Policies []json.RawMessage
}

// Cluster is one cluster of a fixture.
type Cluster struct {
	Name   string
	Meshes []string
	Stale  bool
	// Labels are the cluster's labels in the server's registry, which
	// cluster selectors match.
	Labels map[string]string
	// Objects are the cluster's inputs as JSON objects; objects of group
	// policy.meshrelay.io are policies defined in the cluster.
	Objects []json.RawMessage
}

type fixtureFile struct {
	Clusters []struct {
		Name      string            `json:"name"`
		Meshes    []string          `json:"meshes"`
		Stale     bool              `json:"stale"`
		Labels    map[string]string `json:"labels"`
		Manifests []string          `json:"manifests"`
		Objects   []json.RawMessage `json:"objects"`
	} `json:"clusters"`
	Policies    []json.RawMessage `json:"policies"`
	PolicyFiles []string          `json:"policyFiles"`
}

// LoadFixture reads a fixture file; see the package documentation.
func LoadFixture(path string) (*Fixture, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load fixture: %w", err)
	}
	var ff fixtureFile
	if err := yaml.UnmarshalStrict(data, &ff); err != nil {
		return nil, fmt.Errorf("load fixture %s: %w", path, err)
	}
	base := filepath.Dir(path)
	f := &Fixture{Policies: ff.Policies}
	for _, fc := range ff.Clusters {
		if fc.Name == "" {
			return nil, fmt.Errorf("load fixture %s: a cluster has no name", path)
		}
		c := Cluster{Name: fc.Name, Meshes: fc.Meshes, Stale: fc.Stale, Labels: fc.Labels, Objects: fc.Objects}
		for _, m := range fc.Manifests {
			objs, err := readManifests(filepath.Join(base, m))
			if err != nil {
				return nil, fmt.Errorf("load fixture %s: cluster %q: %w", path, fc.Name, err)
			}
			c.Objects = append(c.Objects, objs...)
		}
		f.Clusters = append(f.Clusters, c)
	}
	for _, m := range ff.PolicyFiles {
		objs, err := readManifests(filepath.Join(base, m))
		if err != nil {
			return nil, fmt.Errorf("load fixture %s: %w", path, err)
		}
		f.Policies = append(f.Policies, objs...)
	}
	return f, nil
}

// discovered returns f without the objects an agent would not discover
// for a translator declaring inputKinds: those of custom kinds not among
// them (see sdk.AlwaysDiscovered). An object whose kind does not decode
// stays, for the update to refuse.
func (f *Fixture) discovered(inputKinds []string) *Fixture {
	declared := map[string]bool{}
	for _, k := range inputKinds {
		declared[k] = true
	}
	out := &Fixture{Policies: f.Policies, Clusters: make([]Cluster, len(f.Clusters))}
	for i, c := range f.Clusters {
		c.Objects = slices.DeleteFunc(slices.Clone(c.Objects), func(obj json.RawMessage) bool {
			h, err := snapshot.DecodeHeader(obj)
			if err != nil {
				return false
			}
			gv, err := schema.ParseGroupVersion(h.APIVersion)
			if err != nil {
				return false
			}
			return !sdk.AlwaysDiscovered(gv.Group, h.Kind) && !declared[gv.Group+"/"+h.Kind]
		})
		out.Clusters[i] = c
	}
	return out
}

// readManifests reads every Kubernetes object of a YAML file, or of the
// .yaml, .yml and .json files of a directory in name order.
func readManifests(path string) ([]json.RawMessage, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if st.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		slices.Sort(files)
	}
	var out []json.RawMessage
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		objs, err := splitManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// splitManifests splits a multi-document YAML stream into JSON objects;
// List kinds are flattened.
func splitManifests(data []byte) ([]json.RawMessage, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []json.RawMessage
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if s := strings.TrimSpace(string(j)); s == "null" || s == "" {
			continue
		}
		var list struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(j, &list); err != nil {
			return nil, fmt.Errorf("not an object: %w", err)
		}
		if strings.HasSuffix(list.Kind, "List") && list.Items != nil {
			out = append(out, list.Items...)
			continue
		}
		out = append(out, j)
	}
}
