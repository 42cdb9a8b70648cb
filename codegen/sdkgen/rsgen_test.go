package sdkgen

import (
	"strings"
	"testing"
)

func TestRust(t *testing.T) {
	d, ev := load(t)
	src := gen(t, func() ([]byte, error) { return RustClient(d) })
	if n := count(src, `(?m)^    pub fn [a-z_]+_with\(`); n != 23 {
		t.Errorf("%d _with methods, want 23", n)
	}
	if n := count(src, `(?m)^    pub fn [a-z_]+\(`); n != 46 {
		t.Errorf("%d methods, want 46 (23 and their _with twins)", n)
	}
	for _, want := range []string{
		"    pub fn navigate(&self, session_id: &str, body: &NavigateRequest) -> Result<NavigateAnswer, Error> {",
		"    pub fn navigate_with(&self, session_id: &str, body: &NavigateRequest, opts: &CallOptions) -> Result<NavigateAnswer, Error> {",
		"    pub fn close_task(&self, task_id: &str, body: &CloseTaskRequest) -> Result<CloseTaskResponse, Error> {",
		"    pub fn create_task(&self, body: &CreateTaskRequest) -> Result<CreateTaskAnswer, Error> {",
		"    pub fn get_task(&self, task_id: &str) -> Result<GetTaskResponse, Error> {",
		"    pub fn list_task_events(&self, task_id: &str, after: Option<i64>, limit: Option<i64>) -> Result<ListTaskEventsResponse, Error> {",
		"    pub fn get_artifact(&self, artifact_id: &str) -> Result<Blob, Error> {",
		"    pub fn act(&self, session_id: &str, body: &ActRequest) -> Result<ActAnswer, Error> {",
		`format!("/bap/v1/browser-sessions/{}/navigate", path_escape(session_id))`,
	} {
		if !strings.Contains(src, want) {
			t.Errorf("missing %q", want)
		}
	}
	if n := strings.Count(src, "call.mutating = true;"); n != 13 {
		t.Errorf("%d mutating methods, want 13", n)
	}

	types := gen(t, func() ([]byte, error) { return RustTypes(d, ev) })
	for _, want := range []string{
		"pub struct Receipt {",
		`            200 if crate::transport::only_keys(body, &["receipt"]) => serde_json::from_slice(body).map(ActAnswer::InterruptedCommand),`,
		"            202 => serde_json::from_slice(body).map(ActAnswer::ActPendingApproval),",
		`            200 => serde_json::from_slice(body).map(CreateTaskAnswer::InterruptedCommand),`,
		"pub enum ApprovalDecision {",
		"    Unknown(String),",
		"impl Serialize for TaskState {",
		"pub enum Clause {\n    /// A [`UrlMatchesClause`].\n    UrlMatches(UrlMatchesClause),",
		"    pub r#type: EventType,", // serde takes the raw identifier's name: "type"
		"    #[serde(default)]\n    pub next_after: Option<i64>,",
		"pub enum CreateTaskAnswer {",
		"pub enum ActAnswer {",
		"            \"task.state_changed\" => serde_json::from_value(data).map(EventData::TaskStateChanged),",
	} {
		if !strings.Contains(types, want) {
			t.Errorf("types: missing %q", want)
		}
	}
	if strings.Contains(types, "pub struct Problem ") {
		t.Error("Problem is hand-written in sdk-rs; it must not be generated")
	}
	if n := strings.Count(types, "serde_json::from_value(data).map(EventData::"); n != len(ev) {
		t.Errorf("%d EventData references for %d events", n, len(ev))
	}
}

func TestRustDoc(t *testing.T) {
	got := rsDoc("See `a[0]` at https://example.com/x. Use [brackets] and <tags>.", "")
	want := "/// See `a[0]` at <https://example.com/x>. Use \\[brackets\\] and &lt;tags&gt;.\n"
	if got != want {
		t.Errorf("rsDoc = %q, want %q", got, want)
	}
	if v := rsVariant("task.state_changed"); v != "TaskStateChanged" {
		t.Errorf("rsVariant = %s", v)
	}
}
