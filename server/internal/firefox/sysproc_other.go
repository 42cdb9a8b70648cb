//go:build !linux

package firefox

import "syscall"

// sysProcAttr puts the browser in its own process group and, when cred is set (bap runs as root),
// runs it as the browser user.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
