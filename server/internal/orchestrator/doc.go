// Package orchestrator is the adapter of app.Orchestrator (issue #11): it talks to ONE configured,
// OpenAI-compatible model orchestrator over HTTP.
//
//   - Discovery: GET <url>/v1/models, cached for a short TTL (Config.DiscoveryTTL, default 30 s) and
//     refreshed on demand (Client.Refresh). Only models the orchestrator lists are eligible.
//   - Roles: each role (planner, observer, verifier, safety) maps by configuration (the JSON file of
//     --orchestrator-config, see FileConfig) to an ordered list of approved model ids.
//   - Metadata: a model's provider, region, retention and highest data classification come from the
//     configuration and, where it is silent, from extension fields of the discovery answer
//     (provider or owned_by, region, retention_days, max_classification, input_price_per_m,
//     output_price_per_m). Configuration wins; what neither says stays unknown and fails closed.
//   - Policy (Satisfies): a task's app.ModelPolicy is checked against that metadata; a fallback only
//     ever tries models that satisfy it.
//   - Completion: POST <url>/v1/chat/completions with response_format json_schema (strict),
//     max_tokens and reasoning_effort, and X-Request-Timeout-Ms from the deadline; the body is kept
//     under Config.MaxRequestBytes (64 KiB) by cutting the longest message with a marker. The answer
//     is validated against the schema here too, and the model recorded is the one it names (see
//     servedBy; the virtual model "contextual-orchestrator" is never approved by default). An HTTP
//     error of the model (500, 400, a timeout — Config.CallTimeout, always bounded by the caller's
//     ctx) or an invalid answer is a model failure and the next eligible model of the role is
//     tried; a refusal of the orchestrator itself (429, 503 concurrency_limit_exceeded) is retried
//     with backoff instead and never falls back (limits.go). An answer without usage is charged the
//     worst case.
//
// BAP authenticates with a workload credential of its own (a bearer token), never a client's token;
// the orchestrator holds the provider credentials. The credential is registered with the log
// redaction layer and never appears in errors or failure reasons.
//
// orchestratortest is an in-process fake OpenAI-compatible server for tests (and, through
// orchestratortest/cmd/fakeorch, a tiny standalone one for trying BAP without a real orchestrator).
package orchestrator
