// Command faulty is a test plugin for core/pluginhost. Its start-up
// behaviour is chosen when it is built (-ldflags "-X main.mode=..."):
//
//	sdk          a well-behaved translator served by sdk.Serve
//	raw          (default) the raw protocol, misbehaving on request
//	crash-start  exits before the handshake
//	stdout       writes to stdout before the handshake
//	v2           speaks only protocol version 2
//
// In sdk mode a target whose cluster is named slow-* takes slowTarget to
// compute, one such target at a time, as a translator busy on every core
// would.
//
// In raw mode an update that mentions a cluster with one of these names
// makes it misbehave: crash (exit), hang (never answer), chatter (send
// diagnostics and empty output parts forever), malformed (a body
// that is not JSON), noname (an output without a name), ghost (an output
// for a cluster not in the view), huge (one 70 MB message), big-N (N MB of
// outputs, split into parts). It takes slowPart to take each part of the
// input of a cluster named slow-*, as a plugin ingesting a large view
// would.
//
// A raw plugin named "meshy" declares its backend a mesh and ConfigMap
// its output kind; one named "baddecl" declares an output kind that is not
// "group/Kind".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/protocol"
	"google.golang.org/grpc"
)

var (
	mode = "raw"
	name = "faulty"
)

func main() {
	switch mode {
	case "sdk":
		sdk.Serve(&translator{})
		return
	case "crash-start":
		fmt.Fprintln(os.Stderr, "boom: faulty plugin cannot start")
		os.Exit(3)
	case "stdout":
		fmt.Println("hello from a plugin that prints")
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Trace, Output: os.Stderr, JSONFormat: true})
	srv := &server{logger: logger}
	hs := protocol.Handshake()
	plugins := protocol.ServerPlugins(srv)
	if mode == "v2" {
		hs.ProtocolVersion = 2
		plugins = map[int]plugin.PluginSet{2: {protocol.PluginName: &protocol.GRPCPlugin{Impl: srv}}}
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: plugins,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpc.MaxSendMsgSize(256<<20), grpc.MaxRecvMsgSize(256<<20))...)
		},
		Logger: logger,
	})
}

// slowTarget is how long a slow-* target takes in sdk mode, and slowPart
// how long a part of a slow-* cluster's input takes in raw mode.
const (
	slowTarget = 250 * time.Millisecond
	slowPart   = 50 * time.Millisecond
)

// busy lets one slow target compute at a time.
var busy sync.Mutex

// translator emits one ConfigMap per cluster naming its Services.
type translator struct{}

func (translator) Describe() sdk.Description {
	return sdk.Description{Name: name, Version: "1.0.0", Backends: []string{"test"}, OutputKinds: []string{"/ConfigMap"}}
}

func (translator) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	if strings.HasPrefix(req.Target.Name, "slow-") {
		busy.Lock()
		time.Sleep(slowTarget)
		busy.Unlock()
	}
	var names []string
	for _, s := range req.Target.Services() {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	resp.Emit(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "services", "namespace": "default"},
		"data":     map[string]any{"services": strings.Join(names, ","), "policies": strconv.Itoa(len(req.Fleet.AccessPolicies()))},
	}, policiesOf(req)...)
	return nil
}

func policiesOf(req *sdk.Request) []policyv1alpha1.Policy {
	var ps []policyv1alpha1.Policy
	for _, p := range req.Fleet.AccessPolicies() {
		ps = append(ps, p)
	}
	return ps
}

// server speaks the raw protocol.
type server struct {
	translatorv1.UnimplementedTranslatorServer
	logger hclog.Logger
}

func (s *server) Describe(context.Context, *translatorv1.DescribeRequest) (*translatorv1.DescribeResponse, error) {
	d := &translatorv1.DescribeResponse{Name: name, Version: "1.0.0", Backends: []string{"test"}}
	switch name {
	case "meshy":
		d.Meshes, d.InputKinds, d.OutputKinds = []string{"test"}, []string{"/Service", "example.io/Widget"}, []string{"/ConfigMap"}
	case "baddecl":
		d.OutputKinds = []string{"/ConfigMap", "apps/v1/Deployment"}
	}
	return d, nil
}

func (s *server) Translate(stream translatorv1.Translator_TranslateServer) error {
	view := map[string]bool{}
	var mentioned []string
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch m := req.GetMsg().(type) {
		case *translatorv1.TranslateRequest_Begin:
			mentioned = nil
			if m.Begin.GetFull() {
				view = map[string]bool{}
			}
		case *translatorv1.TranslateRequest_Cluster:
			c := m.Cluster.GetCluster()
			if strings.HasPrefix(c, "slow-") {
				time.Sleep(slowPart)
			}
			mentioned = append(mentioned, c)
			if m.Cluster.GetRemoved() {
				delete(view, c)
			} else {
				view[c] = true
			}
		case *translatorv1.TranslateRequest_Commit:
			s.logger.Warn("translating", "generation", m.Commit.GetGeneration(), "clusters", len(view))
			if err := s.answer(stream, m.Commit.GetGeneration(), view, mentioned); err != nil {
				return err
			}
		}
	}
}

func configMap(name string, data string) *snapshotv1.Resource {
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"default"},"data":{"x":%q}}`, name, data)
	return &snapshotv1.Resource{Id: &snapshotv1.ResourceID{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: name}, Body: []byte(body)}
}

func output(cluster string, more bool, rs ...*snapshotv1.Resource) *translatorv1.TranslateResponse {
	return &translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Output{Output: &translatorv1.ClusterOutput{Cluster: cluster, Backend: "test", Resources: rs, More: more}}}
}

func (s *server) answer(stream translatorv1.Translator_TranslateServer, gen uint64, view map[string]bool, mentioned []string) error {
	send := stream.Send
	for _, c := range mentioned {
		switch {
		case c == "crash":
			panic("faulty plugin crashes on purpose")
		case c == "hang":
			select {}
		case c == "chatter":
			for {
				diag := &translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Diagnostic{Diagnostic: &translatorv1.Diagnostic{Summary: "still here"}}}
				if err := send(diag); err != nil {
					return err
				}
				if err := send(output(c, true)); err != nil {
					return err
				}
				time.Sleep(10 * time.Millisecond)
			}
		case c == "malformed":
			r := configMap("bad", "")
			r.Body = []byte(`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {`)
			if err := send(output(c, false, r)); err != nil {
				return err
			}
		case c == "noname":
			r := configMap("x", "")
			r.Id.Name = ""
			if err := send(output(c, false, r)); err != nil {
				return err
			}
		case c == "ghost":
			if err := send(output("nonexistent", false, configMap("x", ""))); err != nil {
				return err
			}
		case c == "huge":
			if err := send(output(c, false, configMap("huge", strings.Repeat("h", 70<<20)))); err != nil {
				return err
			}
		case strings.HasPrefix(c, "big-"):
			mb, _ := strconv.Atoi(strings.TrimPrefix(c, "big-"))
			const each = 512 << 10
			n := mb << 20 / each
			for i := range n {
				if err := send(output(c, i < n-1, configMap(fmt.Sprintf("big-%04d", i), strings.Repeat("b", each)))); err != nil {
					return err
				}
			}
		default:
			if !view[c] {
				continue // removed
			}
			if err := send(output(c, false, configMap("seen", c))); err != nil {
				return err
			}
		}
	}
	return send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Done{Done: &translatorv1.Done{Generation: gen}}})
}
