package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The production binary carries none of the MCP conformance fixtures: they are compiled only with
// the mcpconformance tag (internal/mcpserver/conformance.go). buildBinary builds as `make build`
// does, without it, whatever tags this test binary was built with.
func TestProductionBinaryHasNoConformanceFixtures(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	syms := string(out)
	if !strings.Contains(syms, "mcpserver.New") {
		t.Fatalf("the symbol table has no mcpserver.New: not the binary this test means (%d bytes of nm output)", len(out))
	}
	for _, line := range strings.Split(syms, "\n") {
		if strings.Contains(line, "mcpserver.(*fixtures)") || strings.Contains(line, "mcpserver.fixtures") {
			t.Errorf("a conformance fixture is in the production binary: %s", strings.TrimSpace(line))
		}
	}
}
