package sdktest

import (
	"context"
	"errors"
	"strings"
	"testing"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

// rawTranslator answers every update with one output, whatever it is, the
// way a plugin written without the SDK might.
type rawTranslator struct {
	translatorv1.UnimplementedTranslatorServer
	out *translatorv1.ClusterOutput
}

func (rawTranslator) Describe(context.Context, *translatorv1.DescribeRequest) (*translatorv1.DescribeResponse, error) {
	return &translatorv1.DescribeResponse{Name: "raw", Version: "1", Backends: []string{"b"}}, nil
}

func (r rawTranslator) Translate(stream translatorv1.Translator_TranslateServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		c := req.GetCommit()
		if c == nil {
			continue
		}
		if err := stream.Send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Output{Output: r.out}}); err != nil {
			return err
		}
		if err := stream.Send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Done{Done: &translatorv1.Done{Generation: c.GetGeneration()}}}); err != nil {
			return err
		}
	}
}

// serveRaw serves srv over an in-memory connection until the test ends.
func serveRaw(t *testing.T, srv translatorv1.TranslatorServer) translatorv1.TranslatorClient {
	t.Helper()
	conn, stop, err := protocol.ServeInMemory("raw", srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return translatorv1.NewTranslatorClient(conn)
}

// TestTranslateRefusesWhatTheServerRefuses checks that sdktest runs the
// server's checks of an answer: outputs the host would refuse fail the
// test instead of reaching a golden file.
func TestTranslateRefusesWhatTheServerRefuses(t *testing.T) {
	f, err := LoadFixture("testdata/fixture/basic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	configMap := func(name string) *snapshotv1.Resource {
		return &snapshotv1.Resource{
			Id:   &snapshotv1.ResourceID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"},
			Body: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"ns"}}`),
		}
	}
	cluster := f.Clusters[0].Name
	tests := map[string]struct {
		out     *translatorv1.ClusterOutput
		wantErr string
	}{
		"a good output": {out: &translatorv1.ClusterOutput{Cluster: cluster, Backend: "b", Resources: []*snapshotv1.Resource{configMap("a")}}},
		"a cluster not in the fleet": {
			out:     &translatorv1.ClusterOutput{Cluster: "ghost", Backend: "b", Resources: []*snapshotv1.Resource{configMap("a")}},
			wantErr: `cluster "ghost", which is not in the fleet view`,
		},
		"a backend not described": {
			out:     &translatorv1.ClusterOutput{Cluster: cluster, Backend: "other", Resources: []*snapshotv1.Resource{configMap("a")}},
			wantErr: `backend "other", which the plugin does not serve`,
		},
		"a body that is not its identity": {
			out:     &translatorv1.ClusterOutput{Cluster: cluster, Backend: "b", Resources: []*snapshotv1.Resource{configMap("x")}},
			wantErr: `metadata.name "x"`,
		},
		"a set whose last part never came": {
			out:     &translatorv1.ClusterOutput{Cluster: cluster, Backend: "b", More: true},
			wantErr: "done before the last part",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := Translate(context.Background(), serveRaw(t, rawTranslator{out: tc.out}), f)
			if tc.wantErr == "" {
				if err != nil || len(res.Outputs) != 1 {
					t.Fatalf("Translate = %+v, %v; want the one output", res, err)
				}
				return
			}
			if !errors.Is(err, host.ErrProtocol) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Translate = %+v, %v; want a protocol error containing %q", res, err, tc.wantErr)
			}
		})
	}
}
