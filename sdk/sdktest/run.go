package sdktest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// Result is what a translator answered to a fixture.
type Result struct {
	// Outputs are the emitted objects, sorted by cluster, backend and object.
	Outputs []sdk.Output
	// Diagnostics are the diagnostics, in the order they were sent.
	Diagnostics []sdk.Diagnostic
}

// Run runs t on the fixture file through the translator protocol, in
// process, and fails the test when translation fails.
func Run(tb testing.TB, t sdk.Translator, fixture string) *Result {
	tb.Helper()
	f, err := LoadFixture(fixture)
	if err != nil {
		tb.Fatal(err)
	}
	return RunFixture(tb, t, f)
}

// RunFixture is Run with a loaded fixture.
func RunFixture(tb testing.TB, t sdk.Translator, f *Fixture) *Result {
	tb.Helper()
	conn, stop, err := sdk.ServeInProcess(t)
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
	return plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  protocol.Handshake(),
		VersionedPlugins: protocol.ClientPlugins(),
		Cmd:              exec.Command(binary),
		SecureConfig:     &plugin.SecureConfig{Checksum: sum[:], Hash: sha256.New()},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     time.Minute,
		Logger:           hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Warn}),
		GRPCDialOptions:  protocol.DialOptions(),
	}), nil
}

// Translate sends the fixture as one full update over client and collects
// the answer.
func Translate(ctx context.Context, client translatorv1.TranslatorClient, f *Fixture) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Translate(ctx)
	if err != nil {
		return nil, fmt.Errorf("open translate session: %w", err)
	}
	reqs, err := fullUpdate(f, 1)
	if err != nil {
		return nil, err
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			return nil, fmt.Errorf("send update: %w", err)
		}
	}
	a, err := receive(stream)
	if err != nil {
		return nil, err
	}
	_ = stream.CloseSend()
	res := &Result{Diagnostics: a.diagnostics}
	for _, set := range a.sets {
		res.Outputs = append(res.Outputs, set...)
	}
	sortOutputs(res.Outputs)
	return res, nil
}

// answer is what a plugin sent for one update: the output sets it sent, by
// cluster and backend, and every diagnostic.
type answer struct {
	sets        map[[2]string][]sdk.Output
	diagnostics []sdk.Diagnostic
}

// receive reads the answer to one update, up to its Done.
func receive(stream translatorv1.Translator_TranslateClient) (*answer, error) {
	a := &answer{sets: map[[2]string][]sdk.Output{}}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("plugin closed the session without answering")
		}
		if err != nil {
			return nil, fmt.Errorf("receive answer: %w", err)
		}
		switch m := msg.GetMsg().(type) {
		case *translatorv1.TranslateResponse_Output:
			key := [2]string{m.Output.GetCluster(), m.Output.GetBackend()}
			if _, ok := a.sets[key]; !ok {
				a.sets[key] = []sdk.Output{}
			}
			for _, r := range m.Output.GetResources() {
				id := r.GetId()
				a.sets[key] = append(a.sets[key], sdk.Output{
					Cluster: key[0], Backend: key[1],
					Group: id.GetGroup(), Version: id.GetVersion(), Kind: id.GetKind(), Namespace: id.GetNamespace(), Name: id.GetName(),
					Body: r.GetBody(),
				})
			}
		case *translatorv1.TranslateResponse_Diagnostic:
			a.diagnostics = append(a.diagnostics, diagnosticFromProto(m.Diagnostic))
		case *translatorv1.TranslateResponse_Done:
			if e := m.Done.GetError(); e != "" {
				return nil, fmt.Errorf("translate: %s", e)
			}
			return a, nil
		}
	}
}

func sortOutputs(outs []sdk.Output) {
	slices.SortFunc(outs, func(a, b sdk.Output) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Backend, b.Backend), cmp.Compare(a.Group, b.Group),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// fullUpdate encodes a fixture as the messages of one full update.
func fullUpdate(f *Fixture, gen uint64) ([]*translatorv1.TranslateRequest, error) {
	reqs := []*translatorv1.TranslateRequest{{Msg: &translatorv1.TranslateRequest_Begin{Begin: &translatorv1.Begin{Generation: gen, Full: true}}}}
	for _, c := range f.Clusters {
		in := &translatorv1.ClusterInput{Cluster: c.Name, Stale: c.Stale, Meshes: c.Meshes}
		for _, o := range c.Objects {
			r, err := resourceOf(o)
			if err != nil {
				return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
			}
			in.Upserts = append(in.Upserts, r)
		}
		reqs = append(reqs, &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: in}})
	}
	pc := &translatorv1.PolicyChange{}
	for _, o := range f.Policies {
		r, err := resourceOf(o)
		if err != nil {
			return nil, fmt.Errorf("policies: %w", err)
		}
		pc.Upserts = append(pc.Upserts, r)
	}
	reqs = append(reqs,
		&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Policies{Policies: pc}},
		&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: gen}}})
	return reqs, nil
}

func resourceOf(obj json.RawMessage) (*snapshotv1.Resource, error) {
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	if m.APIVersion == "" || m.Kind == "" || m.Metadata.Name == "" {
		return nil, fmt.Errorf("object needs apiVersion, kind and metadata.name: %s", obj)
	}
	group, version, ok := strings.Cut(m.APIVersion, "/")
	if !ok {
		group, version = "", m.APIVersion
	}
	return &snapshotv1.Resource{
		Id:   &snapshotv1.ResourceID{Group: group, Version: version, Kind: m.Kind, Namespace: m.Metadata.Namespace, Name: m.Metadata.Name},
		Body: obj,
	}, nil
}

func diagnosticFromProto(d *translatorv1.Diagnostic) sdk.Diagnostic {
	sev := sdk.SeverityError
	if d.GetSeverity() == translatorv1.Diagnostic_SEVERITY_WARNING {
		sev = sdk.SeverityWarning
	}
	p := d.GetPolicy()
	return sdk.Diagnostic{
		Severity: sev, Summary: d.GetSummary(), Detail: d.GetDetail(), Path: d.GetPath(), Cluster: d.GetCluster(),
		Policy: sdk.PolicyRef{Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(), Cluster: p.GetCluster()},
	}
}
