//go:build !unix

package testenv

import (
	"os"
	"syscall"
)

// sysProcAttr returns nil: process groups are a Unix feature.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killGroup kills the process pid.
func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
