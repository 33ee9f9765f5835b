package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// crdGVR identifies CustomResourceDefinitions for the dynamic client.
var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdEstablishTimeout bounds how long installed CRDs may take to be
// established.
const crdEstablishTimeout = 60 * time.Second

// InstallCRDs creates or updates the CustomResourceDefinitions in the given
// YAML or JSON files and waits until every one is established, so that its
// resources can be used at once. A directory stands for every .yaml, .yml and
// .json file below it; relative paths are resolved against the repository
// root. Installing the same CRDs again is harmless.
//
// Clients that cache discovery (a RESTMapper) must reset it to see the new
// resources.
func (k *Kube) InstallCRDs(t testing.TB, paths ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crdEstablishTimeout+30*time.Second)
	defer cancel()
	if err := k.installCRDs(ctx, paths...); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

func (k *Kube) installCRDs(ctx context.Context, paths ...string) error {
	crds, err := readCRDs(paths)
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	client, err := dynamic.NewForConfig(k.Config())
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	res := client.Resource(crdGVR)
	for _, crd := range crds {
		if err := applyCRD(ctx, res, crd); err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		if err := waitEstablished(ctx, res, crd.GetName()); err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.GetName(), err)
		}
	}
	return nil
}

// readCRDs reads every CustomResourceDefinition in the files and directories
// at paths, in a stable order.
func readCRDs(paths []string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, p := range paths {
		abs, err := repoPath(p)
		if err != nil {
			return nil, err
		}
		info, err := os.Stat(abs)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, abs)
			continue
		}
		var found []string
		err = filepath.WalkDir(abs, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(path)) {
			case ".yaml", ".yml", ".json":
				if !d.IsDir() {
					found = append(found, path)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no .yaml, .yml or .json files", abs)
		}
		slices.Sort(found)
		files = append(files, found...)
	}

	var crds []*unstructured.Unstructured
	for _, file := range files {
		docs, err := readCRDFile(file)
		if err != nil {
			return nil, err
		}
		crds = append(crds, docs...)
	}
	return crds, nil
}

// readCRDFile reads the CustomResourceDefinitions in one multi-document YAML
// or JSON file; any other kind is an error.
func readCRDFile(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 64<<10)
	var crds []*unstructured.Unstructured
	for i := 0; ; i++ {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return crds, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if gvk := u.GroupVersionKind(); gvk.Group != crdGVR.Group || gvk.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: document %d is a %s, not a CustomResourceDefinition", path, i, gvk)
		}
		crds = append(crds, u)
	}
}

// applyCRD creates crd, or replaces the existing one of that name.
func applyCRD(ctx context.Context, res dynamic.NamespaceableResourceInterface, crd *unstructured.Unstructured) error {
	_, err := res.Create(ctx, crd, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	for {
		cur, err := res.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		upd := crd.DeepCopy()
		upd.SetResourceVersion(cur.GetResourceVersion())
		_, err = res.Update(ctx, upd, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// waitEstablished waits until the CRD called name is Established and its
// names are accepted.
func waitEstablished(ctx context.Context, res dynamic.NamespaceableResourceInterface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, crdEstablishTimeout)
	defer cancel()
	for {
		crd, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		established, accepted := crdConditions(crd)
		if established && accepted {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not established: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// crdConditions reports whether crd's Established and NamesAccepted
// conditions are True.
func crdConditions(crd *unstructured.Unstructured) (established, accepted bool) {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["status"] != "True" {
			continue
		}
		switch m["type"] {
		case "Established":
			established = true
		case "NamesAccepted":
			accepted = true
		}
	}
	return established, accepted
}
