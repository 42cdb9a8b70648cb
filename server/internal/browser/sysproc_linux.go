package browser

import "syscall"

// sysProcAttr puts the browser in its own process group (so that stop can
// kill its helpers) and kills it when this process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
