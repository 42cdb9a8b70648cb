package firefox

import "syscall"

// sysProcAttr puts the browser in its own process group (so that Close stops its content
// processes too), kills it when this process dies and, when cred is set (bap runs as root), runs
// it as the browser user. Go sets the parent-death signal after switching credentials, so the
// switch does not clear it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}
