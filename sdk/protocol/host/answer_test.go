package host

import (
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
)

// TestAddResourcesAgainstAccepted checks that a resource equal to one of
// the plugin's last answer is taken as it is, and that anything else is still
// checked: a changed body, a body under another identity.
func TestAddResourcesAgainstAccepted(t *testing.T) {
	id := snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	good, err := snapshot.NewResource(id, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}`))
	if err != nil {
		t.Fatal(err)
	}
	checked := map[checkedKey]struct{}{keyOf(good): {}}
	other := snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "b"}
	tests := map[string]struct {
		id      snapshot.ID
		body    string
		wantErr string
	}{
		"the accepted resource":          {id: id, body: string(good.Body)},
		"a changed, valid body":          {id: id, body: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"k":"v"}}`},
		"a changed body of another name": {id: id, body: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"ns"}}`, wantErr: `metadata.name "x"`},
		"a changed body that is no JSON": {id: id, body: `{"apiVersion":`, wantErr: "not valid JSON"},
		"the accepted body, another id":  {id: other, body: string(good.Body), wantErr: `metadata.name "a"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := &Session{maxOutput: 1 << 20}
			a := &assembly{key: [2]string{"east", "b"}, seen: map[snapshot.ID]bool{}, checked: checked, keys: map[checkedKey]struct{}{}}
			err := s.addResources(a, []*snapshotv1.Resource{{Id: snapshot.IDToProto(tc.id), Body: []byte(tc.body)}})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("addResources = %v, want it accepted", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("addResources = %v, want an error containing %q", err, tc.wantErr)
			case err == nil && len(a.out.Resources) != 1:
				t.Fatalf("addResources kept %d resources, want 1", len(a.out.Resources))
			}
		})
	}
}
