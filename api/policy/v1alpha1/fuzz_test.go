package v1alpha1

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode checks that decoding and validating arbitrary input never
// panics. Its corpus is in testdata/fuzz/FuzzDecode; the shared example
// policies are added as seeds too.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("../../../testdata/policies/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(vdDoc + "---\n" + apDoc + "---\n" + tpDoc))
	f.Fuzz(func(t *testing.T, data []byte) {
		policies, _ := Decode(data)
		for _, p := range policies {
			if p == nil {
				t.Fatal("Decode() returned a nil policy")
			}
			_ = p.Validate()
			_ = p.DeepCopyObject()
		}
	})
}
