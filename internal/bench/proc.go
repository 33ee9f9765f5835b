package bench

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// clockTicks is USER_HZ, the unit of CPU times in /proc/PID/stat on Linux.
const clockTicks = 100

// ProcStats are one process's resource figures from /proc.
type ProcStats struct {
	// CPUSeconds is user plus system time.
	CPUSeconds float64 `json:"cpu_seconds"`
	// RSSBytes is the resident set now; PeakRSSBytes its high-water mark (VmHWM).
	RSSBytes     int64 `json:"rss_bytes"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// plus returns the sum of two processes' figures.
func (s ProcStats) plus(o ProcStats) ProcStats {
	return ProcStats{
		CPUSeconds: s.CPUSeconds + o.CPUSeconds, RSSBytes: s.RSSBytes + o.RSSBytes,
		PeakRSSBytes: s.PeakRSSBytes + o.PeakRSSBytes,
	}
}

// readProc reads a process's CPU time and memory from /proc.
func readProc(pid int) (ProcStats, error) {
	var st ProcStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, fmt.Errorf("read process %d: %w", pid, err)
	}
	// The command name may hold spaces; fields start after its ")".
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 13 {
		return st, fmt.Errorf("read process %d: short stat", pid)
	}
	st.CPUSeconds = statCPU(fields).Seconds()
	if cpu, err := processCPU(pid); err == nil {
		st.CPUSeconds = cpu.Seconds()
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, fmt.Errorf("read process %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "VmRSS":
			st.RSSBytes = kb << 10
		case "VmHWM":
			st.PeakRSSBytes = kb << 10
		}
	}
	return st, sc.Err()
}

// statCPU is the user plus system time in the fields of /proc/PID/stat
// after the command name, to the tick.
func statCPU(fields []string) time.Duration {
	utime, _ := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(fields[12], 10, 64) // field 15
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// processCPU reads the CPU time of all of pid's threads, exited ones
// included, to the nanosecond: its CPU-time clock, the one
// clock_getcpuclockid(3) names. /proc/PID/stat counts in ticks of 10 ms,
// too coarse for a quiet process over a window of seconds.
func processCPU(pid int) (time.Duration, error) {
	const cpuClockSched = 2 // CPUCLOCK_SCHED: user plus system time
	clock := uintptr(^pid<<3 | cpuClockSched)
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, fmt.Errorf("read the CPU clock of process %d: %w", pid, errno)
	}
	return time.Duration(ts.Nano()), nil
}

// children returns the pids whose parent is pid.
func children(pid int) []int {
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == pid {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, child)
		}
	}
	return out
}

// tcpInfoBytesReceived is the offset of tcpi_bytes_received in Linux's
// struct tcp_info (since Linux 4.1).
const tcpInfoBytesReceived = 128

// receivedFrom sums the bytes this process's TCP connections to ports
// received, as the kernel counts them (TLS and HTTP/2 framing included).
// Connections closed since the last call are not counted.
func receivedFrom(ports ...int) int64 {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	var total int64
	var buf [256]byte
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		sa, err := syscall.Getpeername(fd)
		if err != nil {
			continue
		}
		if in4, ok := sa.(*syscall.SockaddrInet4); !ok || !slices.Contains(ports, in4.Port) {
			continue
		}
		n := uint32(len(buf))
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if errno != 0 || n < tcpInfoBytesReceived+8 {
			continue
		}
		total += int64(binary.NativeEndian.Uint64(buf[tcpInfoBytesReceived:]))
	}
	return total
}

// raiseFileLimit raises the soft limit on open files to the hard limit, so
// thousands of agents and their connections fit.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read open file limit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, fmt.Errorf("raise open file limit: %w", err)
		}
	}
	return lim.Cur, nil
}

// loadAverage returns the 1-minute load average, or 0.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(data), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// cpuTime returns the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
