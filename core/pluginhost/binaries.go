package pluginhost

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// FindBinaries looks in each directory in turn for the binaries
// meshrelay-plugin-NAME of every name and returns their paths from the
// first directory that holds them all, or false when none does.
func FindBinaries(names []string, dirs ...string) (map[string]string, bool) {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		found := map[string]string{}
		for _, name := range names {
			p := filepath.Join(d, BinaryPrefix+name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				found[name] = p
			}
		}
		if len(found) == len(names) {
			return found, true
		}
	}
	return nil, false
}

// BuildBinaries builds ./cmd/meshrelay-plugin-NAME of the meshrelay source
// tree at root into dir with the Go toolchain and returns their paths.
func BuildBinaries(ctx context.Context, root, dir string, names []string) (map[string]string, error) {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, name := range names {
		args = append(args, "./cmd/"+BinaryPrefix+name)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build plugins %s: %w\n%s", strings.Join(names, ", "), err, stderr.String())
	}
	found := map[string]string{}
	for _, name := range names {
		found[name] = filepath.Join(dir, BinaryPrefix+name)
	}
	return found, nil
}
