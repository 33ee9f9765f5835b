package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/meshrelay/meshrelay/core/snapshot"
)

type fixedSink struct {
	results map[snapshot.ID]error
	err     error
	calls   int
}

func (f *fixedSink) Apply(context.Context, string, *snapshot.Snapshot, bool) (map[snapshot.ID]error, error) {
	f.calls++
	return f.results, f.err
}

func TestTeeAppliesEverywhereAndMerges(t *testing.T) {
	a := snapshot.ID{Version: "v1", Kind: "Service", Name: "a"}
	b := snapshot.ID{Version: "v1", Kind: "Service", Name: "b"}
	first := &fixedSink{results: map[snapshot.ID]error{a: errors.New("first")}}
	second := &fixedSink{results: map[snapshot.ID]error{a: errors.New("second"), b: errors.New("b failed")}, err: errors.New("second sink down")}
	res, err := Tee(first, second).Apply(context.Background(), "envoy", snapshot.Empty, true)
	if first.calls != 1 || second.calls != 1 {
		t.Fatalf("Tee called the sinks %d and %d times, want once each", first.calls, second.calls)
	}
	if err == nil || res[a].Error() != "first" || res[b] == nil {
		t.Errorf("Tee = %v, %v; want the first error per resource and the sink error", res, err)
	}
}

func TestServerAddressesRotate(t *testing.T) {
	a := &Agent{opts: Options{Server: "r1:9900, r2:9900"}}
	got := []string{a.target()}
	a.attempt.Add(1)
	got = append(got, a.target())
	a.attempt.Add(1)
	got = append(got, a.target())
	want := []string{"r1:9900", "r2:9900", "r1:9900"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("targets = %v, want %v", got, want)
		}
	}
	if a.serverName() != "r1" {
		t.Errorf("serverName = %q, want r1", a.serverName())
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := map[string]func(*Options){
		"bad cluster":  func(o *Options) { o.Cluster = "Not_Valid" },
		"no server":    func(o *Options) { o.Server = "" },
		"bad mode":     func(o *Options) { o.Mode = "plain" },
		"no heartbeat": func(o *Options) { o.Heartbeat = 0 },
		"insecure to a remote server": func(o *Options) {
			o.Insecure, o.Server = true, "meshrelay.example.com:9900"
		},
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			o.Cluster, o.CAFile = "east", "ca.crt"
			mod(&o)
			if err := o.Validate(); err == nil {
				t.Errorf("Validate() = nil, want an error")
			}
		})
	}
	o := DefaultOptions()
	o.Cluster, o.CAFile = "east", "ca.crt"
	if err := o.Validate(); err != nil {
		t.Errorf("Validate(defaults) = %v", err)
	}
}
