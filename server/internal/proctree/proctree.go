// Package proctree measures process trees from /proc for tests and benchmarks: which process is
// whose child, and how much memory a multi-process browser takes.
package proctree

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Proc is what /proc/<pid>/stat says of a process.
type Proc struct {
	State byte // R, S, D, Z (a zombie: it has exited), X, …
	PPID  int
	PGID  int
}

// Exited reports a process that has exited and not been reaped yet (a zombie).
func (p Proc) Exited() bool { return p.State == 'Z' || p.State == 'X' }

// Processes reads every process of the machine.
func Processes() map[int]Proc {
	out := map[int]Proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited since the listing
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 3 || len(f[0]) != 1 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgid, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil {
			out[pid] = Proc{State: f[0][0], PPID: ppid, PGID: pgid}
		}
	}
	return out
}

// Parents maps every process of the machine to its parent.
func Parents() map[int]int {
	out := map[int]int{}
	for pid, p := range Processes() {
		out[pid] = p.PPID
	}
	return out
}

// Children returns the processes whose parent is pid.
func Children(pid int) map[int]bool {
	out := map[int]bool{}
	for p, pp := range Parents() {
		if pp == pid {
			out[p] = true
		}
	}
	return out
}

// PSS is the proportional set size, in bytes, of root and every process below it: a
// multi-process browser's memory, shared pages counted once.
func PSS(root int) int64 {
	parents := Parents()
	in := map[int]bool{root: true}
	for changed := true; changed; {
		changed = false
		for pid, ppid := range parents {
			if in[ppid] && !in[pid] {
				in[pid], changed = true, true
			}
		}
	}
	var total int64
	for pid := range in {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}
