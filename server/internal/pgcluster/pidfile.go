package pgcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// pidFile is what a running postmaster writes to <pgdata>/postmaster.pid. The postmaster writes the
// lines one after another while it starts, so later fields may be missing.
type pidFile struct {
	pid       int
	dataDir   string
	port      int
	socketDir string // the first of unix_socket_directories
	status    string // "starting", "ready", "stopping" or "standby" (PostgreSQL 10+)
}

// readPidFile returns ok=false when the file does not exist.
func readPidFile(path string) (pf pidFile, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return pidFile{}, false, nil
	}
	if err != nil {
		return pidFile{}, false, fmt.Errorf("reading %s: %w", path, err)
	}
	pf, err = parsePidFile(b)
	if err != nil {
		return pidFile{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return pf, true, nil
}

func parsePidFile(b []byte) (pidFile, error) {
	lines := strings.Split(string(b), "\n")
	line := func(i int) string {
		if i < len(lines) {
			return strings.TrimSpace(lines[i])
		}
		return ""
	}
	pid, err := strconv.Atoi(line(0))
	if err != nil || pid == 0 {
		return pidFile{}, fmt.Errorf("no PID on the first line of %q", bytes.TrimSpace(b))
	}
	port, _ := strconv.Atoi(line(3))
	return pidFile{pid: pid, dataDir: line(1), port: port, socketDir: line(4), status: line(7)}, nil
}

// alive tells whether a process with this PID exists (EPERM means it does but belongs to someone else).
// Like PostgreSQL's own lock file check, it counts a zombie (exited, not yet reaped) as alive: postgres
// refuses to start while the PID in postmaster.pid exists at all.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// zombie tells whether pid has exited but its parent has not reaped it yet. It reads the process state from /proc/<pid>/stat: "pid (comm) S ...", where comm may hold spaces
// and parentheses.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// looksLikePostgres reports whether the process pid may be a postgres server, from /proc/<pid>/cmdline.
// It answers true when it cannot tell, so the caller only uses it to recognise a reused PID.
func looksLikePostgres(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return true
	}
	return bytes.Contains(b, []byte("postgres"))
}
