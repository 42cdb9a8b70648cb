package sdkgen

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/originweave/bap/codegen/apimodel"
)

func load(t *testing.T) (*apimodel.Document, []apimodel.EventMessage) {
	t.Helper()
	d, err := apimodel.LoadOpenAPI("../../server/internal/apigen/openapi.gen.json")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := apimodel.LoadEvents("../../server/internal/apigen/asyncapi.gen.json")
	if err != nil {
		t.Fatal(err)
	}
	return d, ev
}

func gen(t *testing.T, f func() ([]byte, error)) string {
	t.Helper()
	a, err := f()
	if err != nil {
		t.Fatal(err)
	}
	b, err := f()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("output differs between two runs")
	}
	if !bytes.Contains(a[:200], []byte(apimodel.Header)) {
		t.Fatalf("no generated-code header in %q", a[:80])
	}
	return string(a)
}

func count(s, re string) int { return len(regexp.MustCompile(re).FindAllString(s, -1)) }

func TestGoClient(t *testing.T) {
	d, _ := load(t)
	src := gen(t, func() ([]byte, error) { return GoClient(d) })
	if n := count(src, `(?m)^func \(c \*Client\) `); n != 23 {
		t.Errorf("%d methods, want 23", n)
	}
	for _, sig := range []string{
		"func (c *Client) CreateTask(ctx context.Context, body CreateTaskRequest, opts ...CallOption) (*CreateTaskResponse, error)",
		"func (c *Client) Navigate(ctx context.Context, sessionID string, body NavigateRequest, opts ...CallOption) (*NavigateResponse, error)",
		"func (c *Client) GetTask(ctx context.Context, taskID string, opts ...CallOption) (*GetTaskResponse, error)",
		"func (c *Client) ListTaskEvents(ctx context.Context, taskID string, after int, limit int, opts ...CallOption) (*ListTaskEventsResponse, error)",
		"func (c *Client) GetArtifact(ctx context.Context, artifactID string, opts ...CallOption) (*Blob, error)",
		"func (c *Client) ResolveApproval(ctx context.Context, approvalID string, body ResolveApprovalRequest, opts ...CallOption) (*ResolveApprovalResponse, error)",
		// The interrupted replay: every operation that may answer it, whatever its status.
		"func (r *ActResponse) Interrupted() (*InterruptedCommandResponse, bool) {",
		"func (r *CreateTaskResponse) Interrupted() (*InterruptedCommandResponse, bool) {",
		`	if r == nil || !onlyFields(r, "Receipt") || !slices.Contains([]string{"unknown_outcome", "reconciliation_required"}, string(r.Receipt.Outcome)) {`,
	} {
		if !strings.Contains(src, sig) {
			t.Errorf("missing %s", sig)
		}
	}
	if n := count(src, `(?m)\) Interrupted\(\) `); n != 12 {
		t.Errorf("%d Interrupted methods, want 12 (the 8 two-phase contract operations, create_task, request_approval, create_browser_session, replay_task)", n)
	}
	if strings.Contains(src, "func (r *CloseTaskResponse) Interrupted") {
		t.Error("close_task runs in one transaction and is never interrupted")
	}
	if strings.Contains(src, "StreamTaskEvents") || strings.Contains(src, "GetHealthz") {
		t.Error("a non-contract operation became a method")
	}
	if n := count(src, `mutating: true`); n != 13 {
		t.Errorf("%d mutating methods, want 13", n)
	}
}

func TestGoEvents(t *testing.T) {
	d, ev := load(t)
	src := gen(t, func() ([]byte, error) { return GoEvents(d, ev) })
	if !strings.Contains(src, `"task.state_changed": func() any { return new(TaskStateChangedData) }`) {
		t.Error("no TaskStateChangedData constructor")
	}
	if n := count(src, `func\(\) any \{ return new\(`); n != len(ev) {
		t.Errorf("%d constructors for %d events", n, len(ev))
	}
}

func TestPython(t *testing.T) {
	d, ev := load(t)
	src := gen(t, func() ([]byte, error) { return Python(d, ev) })
	if n := count(src, `(?m)^    def [a-z]`); n != 23 {
		t.Errorf("%d methods, want 23", n)
	}
	for _, want := range []string{
		"    def navigate(\n        self,\n        session_id: str,\n        body: \"NavigateRequest\",\n        *,\n        idempotency_key: Optional[str] = None,",
		"    def get_task(\n        self,\n        task_id: str,\n        *,\n        timeout: Optional[float] = None,\n    ) -> \"GetTaskResponse\":",
		"    def list_task_events(\n        self,\n        task_id: str,\n        *,\n        after: Optional[int] = None,\n        limit: Optional[int] = None,",
		"    def close_task(\n        self,\n        task_id: str,\n        body: Optional[\"CloseTaskRequest\"] = None,",
		") -> Union[\"ActResponse\", \"InterruptedCommandResponse\", \"ActPendingApprovalResponse\"]:",
		") -> Union[\"CancelTaskResponse\", \"InterruptedCommandResponse\"]:",
		"def is_interrupted_command_response(answer: Mapping[str, object]) -> TypeGuard[\"InterruptedCommandResponse\"]:",
		"    return len(answer) > 0 and all(k in (\"receipt\",) for k in answer) and all(k in answer for k in (\"receipt\",))",
		"class Receipt(TypedDict):",
		"TaskStateChangedData = TypedDict(", // `from` is a keyword: functional syntax
		"\"task.state_changed\": TaskStateChangedData,",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("missing %q", want)
		}
	}
}

func TestTypeScript(t *testing.T) {
	d, ev := load(t)
	src := gen(t, func() ([]byte, error) { return TSClient(d) })
	if n := count(src, `(?m)^  [a-z][A-Za-z]*\(`); n != 23 {
		t.Errorf("%d methods, want 23", n)
	}
	for _, want := range []string{
		"  navigate(sessionId: string, body: NavigateRequest, options?: CallOptions): Promise<NavigateResponse | InterruptedCommandResponse> {",
		"  act(sessionId: string, body: ActRequest, options?: CallOptions): Promise<ActResponse | InterruptedCommandResponse | ActPendingApprovalResponse> {",
		"export function isInterruptedCommandResponse(answer: object): answer is InterruptedCommandResponse {",
		"  createTask(body: CreateTaskRequest, options?: CallOptions): Promise<CreateTaskResponse | InterruptedCommandResponse> {",
		"  listTaskEvents(taskId: string, query?: { after?: number; limit?: number }, options?: CallOptions): Promise<ListTaskEventsResponse> {",
		"  closeTask(taskId: string, body: CloseTaskRequest = {}, options?: CallOptions): Promise<CloseTaskResponse> {",
		"  getArtifact(artifactId: string, options?: CallOptions): Promise<ArtifactBlob> {",
		"export type Receipt = S[\"Receipt\"];",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("missing %q", want)
		}
	}
	evs := gen(t, func() ([]byte, error) { return TSEvents(d, ev) })
	if n := strings.Count(evs, `  | S["`); n != len(ev) {
		t.Errorf("%d union members for %d events", n, len(ev))
	}
}

func TestWrap(t *testing.T) {
	got := wrap("one two three four\n\nfive", "// ", 12)
	if want := "// one two\n// three\n// four\n//\n// five\n"; got != want {
		t.Errorf("wrap = %q, want %q", got, want)
	}
}
