package testenv

import "syscall"

// sysProcAttr puts a child in its own process group, so that it can be
// killed with everything it started, and asks the kernel to kill it when the
// test binary dies, so that no server outlives an interrupted test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
