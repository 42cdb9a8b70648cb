package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/orchestrator"
)

// startDiscoveryTimeout bounds the model discovery at start (a failure is only a warning).
const startDiscoveryTimeout = 5 * time.Second

// newOrchestrator builds the model orchestrator adapter of --orchestrator-url, or answers nil (no
// orchestrator: the app refuses autonomous tasks) when none is configured. It logs one line with
// the URL (never the credential) and the number of models discovered; an orchestrator that cannot
// be reached at start is a warning, not a failure: discovery is retried on use.
func newOrchestrator(ctx context.Context, cfg Config, log *slog.Logger) (app.Orchestrator, error) {
	if cfg.OrchestratorURL == "" {
		log.Info("no model orchestrator configured (--orchestrator-url): autonomous tasks are refused")
		return nil, nil
	}
	token, err := orchestrator.ReadCredential(cfg.OrchestratorCredentialFile, cfg.OrchestratorToken)
	if err != nil {
		return nil, err
	}
	var models orchestrator.FileConfig
	if cfg.OrchestratorConfigFile != "" {
		if models, err = orchestrator.LoadConfigFile(cfg.OrchestratorConfigFile); err != nil {
			return nil, err
		}
	}
	c, err := orchestrator.New(orchestrator.Config{
		URL: cfg.OrchestratorURL, Token: token, Models: models, CallTimeout: cfg.OrchestratorCallTimeout, Logger: log,
		Tracer: cfg.tracer, // nil: none
	})
	if err != nil {
		return nil, err
	}
	if token == "" {
		log.Warn("no workload credential for the model orchestrator (--orchestrator-credential-file or BAP_ORCHESTRATOR_TOKEN): its requests carry no Authorization header")
	}
	approval := "configured roles"
	if models.ApprovesAllListed() {
		approval = "every listed model for every role"
	}
	dctx, cancel := context.WithTimeout(ctx, startDiscoveryTimeout)
	defer cancel()
	n, err := c.Refresh(dctx)
	if err != nil {
		log.Warn("model orchestrator not reachable at start; discovery is retried on use", "url", c.URL(), "err", err, "approved", approval)
		return c, nil
	}
	log.Info("model orchestrator", "url", c.URL(), "models", n, "approved", approval, "authenticated", token != "")
	return c, nil
}
