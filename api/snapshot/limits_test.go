package snapshot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestAssemblerLimits(t *testing.T) {
	part := func(t *testing.T, n, bodyBytes int) Delta {
		var rs []Resource
		for i := range n {
			rs = append(rs, res(t, "ConfigMap", "ns", fmt.Sprintf("cm-%d-%d", n, i), `{"data":{"x":"`+strings.Repeat("x", bodyBytes)+`"}}`))
		}
		return Delta{Full: true, Version: 1, Upserts: rs}
	}
	tests := map[string]struct {
		limits    Limits
		parts     int
		perPart   int
		bodyBytes int
		want      string // the limit named, "" for none
	}{
		"no limits":       {parts: 50, perPart: 2, bodyBytes: 10},
		"within limits":   {limits: Limits{Parts: 5, Bytes: 1 << 20, Resources: 10}, parts: 5, perPart: 2, bodyBytes: 10},
		"too many parts":  {limits: Limits{Parts: 3}, parts: 4, perPart: 1, bodyBytes: 10, want: "parts"},
		"too many bytes":  {limits: Limits{Bytes: 1000}, parts: 3, perPart: 1, bodyBytes: 600, want: "bytes"},
		"too many things": {limits: Limits{Resources: 5}, parts: 3, perPart: 2, bodyBytes: 1, want: "resources"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := Assembler{Limits: tc.limits}
			var err error
			complete := false
			for i := range tc.parts {
				p := part(t, tc.perPart, tc.bodyBytes)
				for j := range p.Upserts {
					p.Upserts[j] = res(t, "ConfigMap", "ns", fmt.Sprintf("cm-%d-%d", i, j), string(p.Upserts[j].Body))
				}
				if _, complete, err = a.Add(p, i == tc.parts-1); err != nil {
					break
				}
			}
			var le *LimitError
			switch {
			case tc.want == "" && (err != nil || !complete):
				t.Fatalf("assembling within the limits: complete=%v err=%v", complete, err)
			case tc.want != "" && (!errors.As(err, &le) || le.Limit != tc.want):
				t.Fatalf("err = %v, want a LimitError naming %q", err, tc.want)
			}
			if tc.want != "" && a.pending != nil {
				t.Error("the assembler kept the refused delta")
			}
		})
	}
}
