package bench

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/internal/testutil"
)

// TestProcessCPU checks the nanosecond CPU clock against the kernel's
// ticks for this process, and that it reads another process's clock.
func TestProcessCPU(t *testing.T) {
	self := os.Getpid()
	clock := func(pid int) time.Duration {
		t.Helper()
		cpu, err := processCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		return cpu
	}
	// Burn at least 50 ms of CPU, by the clock itself.
	start, x := clock(self), 0
	for clock(self)-start < 50*time.Millisecond {
		for i := range 1_000_000 {
			x += i
		}
	}
	_ = x
	before := clock(self)
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	ticks := statCPU(strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])))
	if d := ticks - before; d < -20*time.Millisecond || d > 20*time.Millisecond {
		t.Errorf("the clock says %v of CPU, /proc/self/stat %v: want them within two ticks", before, ticks)
	}

	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	testutil.Eventually(t, "the child's CPU clock to count its start", func() bool {
		return clock(child.Process.Pid) > 0
	})
	if cpu := clock(child.Process.Pid); cpu >= before {
		t.Errorf("a sleeping child used %v of CPU, want less than this test's %v", cpu, before)
	}
	// A pid above any pid_max (2^22 at most) but within the clock's bits.
	if _, err := processCPU(1 << 25); err == nil {
		t.Error("read the CPU clock of a process that does not exist, want an error")
	}
}
