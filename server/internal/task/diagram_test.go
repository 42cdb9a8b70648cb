package task_test

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/task"
)

const lifecycleDoc = "../../../docs/lifecycle.md"

// edgeLine matches a Mermaid transition line "from --> to" with an optional
// ": label".
var edgeLine = regexp.MustCompile(`^\s*(\S+)\s*-->\s*(\S+?)\s*(?::\s*(.*?))?\s*$`)

// edge is one labelled transition: from --trigger--> to.
type edge struct {
	from    string
	trigger string
	to      string
}

func (e edge) String() string { return fmt.Sprintf("%s --> %s: %s", e.from, e.to, e.trigger) }

// mermaidBlock returns the lines of the first ```mermaid block of the file.
func mermaidBlock(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening the lifecycle diagram: %v", err)
	}
	defer f.Close()
	var lines []string
	in, found := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !found && strings.TrimSpace(line) == "```mermaid":
			in, found = true, true
		case in && strings.TrimSpace(line) == "```":
			in = false
		case in:
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	if !found || in {
		t.Fatalf("%s has no closed ```mermaid block", path)
	}
	return lines
}

// diagram is the parsed content of a Mermaid state diagram.
type diagram struct {
	edges    map[edge]bool // labelled edges between states
	initial  []string      // targets of [*] --> x
	final    []string      // sources of x --> [*]
	problems []string      // malformed, unlabelled or duplicate lines
}

// parseDiagram parses the lines of a Mermaid stateDiagram-v2 block.
func parseDiagram(lines []string) diagram {
	d := diagram{edges: map[edge]bool{}}
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "stateDiagram-v2" {
		d.problems = append(d.problems, "the mermaid block must start with stateDiagram-v2")
		return d
	}
	pairs := map[[2]string]int{}
	for i, line := range lines[1:] {
		lineNo := i + 2
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "%%") || !strings.Contains(trimmed, "-->") {
			continue
		}
		m := edgeLine.FindStringSubmatch(line)
		if m == nil {
			d.problems = append(d.problems, fmt.Sprintf("line %d: cannot parse %q", lineNo, trimmed))
			continue
		}
		from, to, label := m[1], m[2], m[3]
		switch {
		case from == "[*]":
			d.initial = append(d.initial, to)
			continue
		case to == "[*]":
			d.final = append(d.final, from)
			continue
		}
		pair := [2]string{from, to}
		if prev, dup := pairs[pair]; dup {
			d.problems = append(d.problems, fmt.Sprintf(
				"line %d: second line for %s --> %s (first on line %d); list every trigger on one line",
				lineNo, from, to, prev))
		}
		pairs[pair] = lineNo
		if label == "" {
			d.problems = append(d.problems, fmt.Sprintf("line %d: edge %s --> %s has no trigger label", lineNo, from, to))
			continue
		}
		for trig := range strings.SplitSeq(label, ",") {
			e := edge{from: from, trigger: strings.TrimSpace(trig), to: to}
			if d.edges[e] {
				d.problems = append(d.problems, fmt.Sprintf("line %d: %s drawn twice", lineNo, e))
			}
			d.edges[e] = true
		}
	}
	return d
}

// nextEdges returns every edge task.Next allows, over all (state, trigger)
// pairs.
func nextEdges() map[edge]bool {
	want := map[edge]bool{}
	for _, from := range task.AllStates() {
		for _, tr := range task.AllTriggers() {
			if to, err := task.Next(from, tr); err == nil {
				want[edge{from: string(from), trigger: string(tr), to: string(to)}] = true
			}
		}
	}
	return want
}

// diffEdges returns, sorted, the edges of want missing from got and the edges
// of got absent from want.
func diffEdges(want, got map[edge]bool) (missing, extra []string) {
	for e := range want {
		if !got[e] {
			missing = append(missing, e.String())
		}
	}
	for e := range got {
		if !want[e] {
			extra = append(extra, e.String())
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return missing, extra
}

// TestLifecycleDiagramMatchesNext checks that docs/lifecycle.md draws exactly
// the transitions task.Next allows.
func TestLifecycleDiagramMatchesNext(t *testing.T) {
	t.Parallel()
	d := parseDiagram(mermaidBlock(t, lifecycleDoc))
	for _, p := range d.problems {
		t.Errorf("%s: %s", lifecycleDoc, p)
	}
	missing, extra := diffEdges(nextEdges(), d.edges)
	for _, e := range missing {
		t.Errorf("%s lacks an edge task.Next allows: %s", lifecycleDoc, e)
	}
	for _, e := range extra {
		t.Errorf("%s draws an edge task.Next refuses: %s", lifecycleDoc, e)
	}

	if !slices.Equal(d.initial, []string{string(task.Created)}) {
		t.Errorf("%s: start edges [*] --> %v, want exactly [*] --> created", lifecycleDoc, d.initial)
	}
	var wantFinal []string
	for _, s := range task.AllStates() {
		if s.Terminal() {
			wantFinal = append(wantFinal, string(s))
		}
	}
	final := slices.Sorted(slices.Values(d.final))
	slices.Sort(wantFinal)
	if !slices.Equal(final, wantFinal) {
		t.Errorf("%s: end edges %v --> [*], want exactly the terminal states %v", lifecycleDoc, final, wantFinal)
	}
}

// TestDiagramCheckReportsDrift feeds the parser and the comparison a doctored
// diagram to show that they name a missing edge, an extra edge, an unlabelled
// line and a duplicate line.
func TestDiagramCheckReportsDrift(t *testing.T) {
	t.Parallel()
	d := parseDiagram([]string{
		"stateDiagram-v2",
		"    %% a comment --> ignored",
		"    [*] --> created: create_task",
		"    created --> admitted: admit",
		"    running --> failed: close_failed, dead_letter",
		"    created --> running: start",
		"    running --> succeeded",
		"    created --> admitted: admit",
		"    succeeded --> [*]",
	})
	want := map[edge]bool{
		{"created", "admit", "admitted"}:      true,
		{"running", "close_failed", "failed"}: true,
		{"running", "dead_letter", "failed"}:  true,
		{"admitted", "start", "running"}:      true,
	}
	missing, extra := diffEdges(want, d.edges)
	if !slices.Equal(missing, []string{"admitted --> running: start"}) {
		t.Errorf("missing = %q", missing)
	}
	if !slices.Equal(extra, []string{"created --> running: start"}) {
		t.Errorf("extra = %q", extra)
	}
	if len(d.problems) != 3 { // unlabelled line, second line for a pair, edge drawn twice
		t.Errorf("problems = %q, want 3", d.problems)
	}
	if !slices.Equal(d.initial, []string{"created"}) || !slices.Equal(d.final, []string{"succeeded"}) {
		t.Errorf("initial = %v, final = %v", d.initial, d.final)
	}
}
