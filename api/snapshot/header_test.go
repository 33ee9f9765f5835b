package snapshot

import "testing"

func TestDecodeHeader(t *testing.T) {
	tests := map[string]struct {
		body    string
		want    ID
		wantErr bool
	}{
		"core group":       {body: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns"},"spec":{}}`, want: ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}},
		"a group":          {body: `{"apiVersion":"networking.istio.io/v1","kind":"Gateway","metadata":{"name":"g"}}`, want: ID{Group: "networking.istio.io", Version: "v1", Kind: "Gateway", Name: "g"}},
		"no header fields": {body: `{"spec":{}}`, want: ID{}},
		"not an object":    {body: `[1]`, wantErr: true},
		"not JSON":         {body: `{"apiVersion":`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, err := DecodeHeader([]byte(tc.body))
			if (err != nil) != tc.wantErr {
				t.Fatalf("DecodeHeader(%s) error = %v, want error %v", tc.body, err, tc.wantErr)
			}
			if err == nil && h.ID() != tc.want {
				t.Fatalf("DecodeHeader(%s).ID() = %+v, want %+v", tc.body, h.ID(), tc.want)
			}
		})
	}
}
