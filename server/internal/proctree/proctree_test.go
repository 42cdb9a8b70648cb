package proctree

import (
	"os"
	"os/exec"
	"testing"
)

func TestTreeOfAChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if p := Processes()[cmd.Process.Pid]; p.PPID != os.Getpid() || p.Exited() || p.PGID <= 0 {
		t.Errorf("the child reads as %+v, want parent %d, alive, in a group", p, os.Getpid())
	}
	if p := Parents()[cmd.Process.Pid]; p != os.Getpid() {
		t.Errorf("the child's parent is %d, want %d", p, os.Getpid())
	}
	if !Children(os.Getpid())[cmd.Process.Pid] {
		t.Errorf("the child is not among this process's children")
	}
	self, child := PSS(os.Getpid()), PSS(cmd.Process.Pid)
	if child <= 0 || self < child {
		t.Errorf("PSS: this process's tree %d bytes, the child's %d; want 0 < child ≤ tree", self, child)
	}
}
