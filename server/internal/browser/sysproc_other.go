//go:build !linux

package browser

import "syscall"

// sysProcAttr puts the browser in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
