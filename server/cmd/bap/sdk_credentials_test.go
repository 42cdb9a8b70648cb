package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bap "github.com/originweave/bap/sdk-go"

	"github.com/originweave/bap/server/internal/waitfor"
)

// The SDKs' client credentials option against the real authorization server of `bap serve
// --profile remote`: a token for this resource, cached, renewed when it nears expiry, and the
// token endpoint's refusal surfacing as the SDK's token error. (The SDKs' own tests use fakes.)
func TestSDKClientCredentialsAgainstTheAuthorizationServer(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	_, base := startRemote(t, bin, dir, "--access-token-ttl", "3s")
	cli := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "sdk", "--scopes", "bap:tasks.read bap:tasks.write")
	id, secret := cli["client_id"].(string), cli["client_secret"].(string)
	ctx := context.Background()

	c := bap.NewClient(base, bap.WithClientCredentials(base+"/oauth2/token", id, secret, base))
	created, err := c.CreateTask(ctx, bap.CreateTaskRequest{Goal: "sdk client credentials",
		Policy: bap.Policy{AllowedOrigins: []string{"https://shop.example.com"}}})
	if err != nil {
		t.Fatalf("create_task with a client-credentials token: %v", err)
	}
	// A token issued now expires no earlier than the SDK's first one: once the server refuses it,
	// the SDK's is refused too and the SDK must renew it.
	later := accessToken(t, base, cli)
	waitfor.Until(t, 30*time.Second, "the first token's lifetime ends", func() (bool, string) {
		status, body, _ := call(t, "GET", base+"/bap/v1/tasks/"+created.Task.TaskId, later, "")
		return status == 401, fmt.Sprint(status, body)
	})
	if got, err := c.GetTask(ctx, created.Task.TaskId); err != nil || got.Task.TaskId != created.Task.TaskId {
		t.Fatalf("get_task after the first token expired: %v", err)
	}
	// A token narrowed to tasks.read cannot create tasks.
	ro := bap.NewClient(base, bap.WithClientCredentials(base+"/oauth2/token", id, secret, base, "bap:tasks.read"))
	if _, err := ro.CreateTask(ctx, bap.CreateTaskRequest{Goal: "x", Policy: bap.Policy{AllowedOrigins: []string{"https://shop.example.com"}}}); !bap.IsProblem(err, bap.ProblemCodeInsufficientScope) {
		t.Fatalf("create_task with a tasks.read token: want 403 insufficient_scope, got %v", err)
	}
	bad := bap.NewClient(base, bap.WithClientCredentials(base+"/oauth2/token", id, "not-the-secret", base), bap.WithRetry(1))
	var te *bap.TokenError
	if _, err := bad.GetTask(ctx, created.Task.TaskId); !errors.As(err, &te) || te.Status != 401 || te.Code != "invalid_client" {
		t.Fatalf("a wrong secret: want *bap.TokenError 401 invalid_client, got %v", err)
	}
	other := bap.NewClient(base, bap.WithClientCredentials(base+"/oauth2/token", id, secret, "https://elsewhere.example"), bap.WithRetry(1))
	if _, err := other.GetTask(ctx, created.Task.TaskId); !errors.As(err, &te) || te.Code != "invalid_target" {
		t.Fatalf("a foreign resource: want *bap.TokenError invalid_target, got %v", err)
	}

	// The Python SDK (stdlib only) against the same authorization server.
	root, _ := filepath.Abs("../../..")
	py := exec.Command("python3", "-c", `
import sys; sys.path.insert(0, sys.argv[1])
import bap
base, cid, secret, task = sys.argv[2:6]
c = bap.Client(base, client_credentials={"token_url": base + "/oauth2/token", "client_id": cid, "client_secret": secret, "resource": base})
print(c.get_task(task)["task"]["task_id"])
`, filepath.Join(root, "sdk-py"), base, id, secret, created.Task.TaskId)
	py.Env = append(py.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := py.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != created.Task.TaskId {
		t.Fatalf("sdk-py with client_credentials: %v\n%s", err, out)
	}
}
