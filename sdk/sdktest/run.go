package sdktest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/meshrelay/meshrelay/api/snapshot"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/protocol"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
	"google.golang.org/grpc"
)

// Result is what a translator answered to a fixture.
type Result struct {
	// Outputs are the emitted objects, sorted by cluster, backend and object.
	Outputs []sdk.Output
	// Diagnostics are the diagnostics, in the order they were sent.
	Diagnostics []sdk.Diagnostic
}

// Translator is what sdktest runs in process: an [sdk.Translator] or an
// [sdk.FleetTranslator].
type Translator interface{ Describe() sdk.Description }

// serve serves t in process.
func serve(t Translator) (*grpc.ClientConn, func(), error) {
	switch t := t.(type) {
	case sdk.Translator:
		return sdk.ServeInProcess(t)
	case sdk.FleetTranslator:
		return sdk.ServeFleetInProcess(t)
	}
	return nil, nil, fmt.Errorf("serve %T: neither an sdk.Translator nor an sdk.FleetTranslator", t)
}

// Run runs t on the fixture file through the translator protocol, in
// process, and fails the test when translation fails: also when t emits
// a kind it does not declare in OutputKinds. Objects of custom kinds t
// does not declare in InputKinds are left out of the fixture, as
// discovery leaves them out.
func Run(tb testing.TB, t Translator, fixture string) *Result {
	tb.Helper()
	f, err := LoadFixture(fixture)
	if err != nil {
		tb.Fatal(err)
	}
	return RunFixture(tb, t, f)
}

// RunFixture is Run with a loaded fixture.
func RunFixture(tb testing.TB, t Translator, f *Fixture) *Result {
	tb.Helper()
	conn, stop, err := serve(t)
	if err != nil {
		tb.Fatal(err)
	}
	defer stop()
	res, err := Translate(context.Background(), translatorv1.NewTranslatorClient(conn), f)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// RunPlugin starts the plugin binary through go-plugin, as the host does,
// and runs it on the fixture file. The process is killed when the test ends.
func RunPlugin(tb testing.TB, binary, fixture string) *Result {
	tb.Helper()
	f, err := LoadFixture(fixture)
	if err != nil {
		tb.Fatal(err)
	}
	return RunPluginFixture(tb, binary, f)
}

// RunPluginFixture is RunPlugin with a loaded fixture.
func RunPluginFixture(tb testing.TB, binary string, f *Fixture) *Result {
	tb.Helper()
	client, err := StartPlugin(binary)
	if err != nil {
		tb.Fatal(err)
	}
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		tb.Fatalf("start plugin %s: %v", binary, err)
	}
	raw, err := rpc.Dispense(protocol.PluginName)
	if err != nil {
		tb.Fatalf("start plugin %s: %v", binary, err)
	}
	res, err := Translate(context.Background(), raw.(*protocol.Client).Translator, f)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// StartPlugin returns a go-plugin client for the binary, configured as the
// host configures its plugins (checksum, AutoMTLS, gRPC only, versioned
// plugin sets). The caller kills it.
func StartPlugin(binary string) (*plugin.Client, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("start plugin: %w", err)
	}
	sum := sha256.Sum256(data)
	cfg := protocol.ClientConfig(exec.Command(binary), sum[:])
	cfg.StartTimeout = time.Minute
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Warn})
	return plugin.NewClient(cfg), nil
}

// Translate sends the fixture as one full update over client and returns
// the answer. It drives the host side of the protocol the server runs
// (sdk/protocol/host), so an answer the server would refuse — an output
// that is not a Kubernetes object matching its identity, for a cluster
// not in the fleet or a backend the plugin did not describe, a set too
// large — fails here too.
//
// Objects of custom kinds the translator does not declare in InputKinds
// are left out of the fixture, as discovery leaves them out.
func Translate(ctx context.Context, client translatorv1.TranslatorClient, f *Fixture) (*Result, error) {
	s, inputKinds, err := openSession(ctx, client)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	v, err := viewOf(f.discovered(inputKinds))
	if err != nil {
		return nil, err
	}
	res, err := s.Translate(ctx, v)
	if err != nil {
		return nil, err
	}
	out := &Result{Diagnostics: diagnosticsOf(res.Diagnostics)}
	for _, set := range res.Outputs {
		out.Outputs = append(out.Outputs, outputsOf(set)...)
	}
	sortOutputs(out.Outputs)
	return out, nil
}

// openSession asks the translator what it is and opens a host session
// with it, with the server's default bound on an output set. It returns
// the input kinds the translator declares.
func openSession(ctx context.Context, client translatorv1.TranslatorClient) (*host.Session, []string, error) {
	d, err := host.Describe(ctx, client)
	if err != nil {
		return nil, nil, err
	}
	s, err := host.Open(client, d.GetName(), d.GetBackends(), host.DefaultMaxOutputBytes)
	return s, d.GetInputKinds(), err
}

// outputsOf returns one output set as the SDK's outputs.
func outputsOf(set host.ClusterOutput) []sdk.Output {
	outs := make([]sdk.Output, len(set.Resources))
	for i, r := range set.Resources {
		outs[i] = sdk.Output{
			Cluster: set.Cluster, Backend: set.Backend,
			ID: r.ID, Body: r.Body,
		}
	}
	return outs
}

func sortOutputs(outs []sdk.Output) {
	slices.SortFunc(outs, func(a, b sdk.Output) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Backend, b.Backend), cmp.Compare(a.Group, b.Group),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// viewOf returns a fixture as the view a host hands its session.
func viewOf(f *Fixture) (host.View, error) {
	v := host.View{Clusters: make(map[string]host.Cluster, len(f.Clusters))}
	for _, c := range f.Clusters {
		in, err := snapshotOf(c.Objects)
		if err != nil {
			return host.View{}, fmt.Errorf("cluster %q: %w", c.Name, err)
		}
		v.Clusters[c.Name] = host.Cluster{Input: in, Stale: c.Stale, Meshes: c.Meshes, Labels: c.Labels}
	}
	ps, err := snapshotOf(f.Policies)
	if err != nil {
		return host.View{}, fmt.Errorf("policies: %w", err)
	}
	v.Policies = ps
	return v, nil
}

func snapshotOf(objs []json.RawMessage) (*snapshot.Snapshot, error) {
	rs, err := resourcesOf(objs)
	if err != nil {
		return nil, err
	}
	return snapshot.New(1, rs)
}

func resourcesOf(objs []json.RawMessage) ([]snapshot.Resource, error) {
	rs := make([]snapshot.Resource, len(objs))
	for i, o := range objs {
		r, err := resourceOf(o)
		if err != nil {
			return nil, err
		}
		rs[i] = r
	}
	return rs, nil
}

// resourceOf returns a fixture's object as a resource, its body as
// written.
func resourceOf(obj json.RawMessage) (snapshot.Resource, error) {
	h, err := snapshot.DecodeHeader(obj)
	if err != nil {
		return snapshot.Resource{}, fmt.Errorf("decode object: %w", err)
	}
	if h.APIVersion == "" || h.Kind == "" || h.Metadata.Name == "" {
		return snapshot.Resource{}, fmt.Errorf("object needs apiVersion, kind and metadata.name: %s", obj)
	}
	id := h.ID()
	return snapshot.Resource{ID: id, Body: obj, Hash: sha256.Sum256(obj)}, nil
}

// diagnosticsOf returns the host's diagnostics as the plugin sent them,
// without the plugin's name the host adds.
func diagnosticsOf(ds []sdk.Diagnostic) []sdk.Diagnostic {
	var out []sdk.Diagnostic
	for _, d := range ds {
		d.Plugin = ""
		out = append(out, d)
	}
	return out
}
