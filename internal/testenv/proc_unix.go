//go:build unix && !linux

package testenv

import "syscall"

// sysProcAttr puts a child in its own process group, so that it can be
// killed with everything it started. Only Linux can also tie the child's
// life to the test binary's; elsewhere Main's cleanup does that.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
