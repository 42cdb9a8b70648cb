package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// Canary values: each must vanish from every log line, whatever way it is logged.
const (
	canaryJWT    = "eyJhbGciOiJFUzI1NiIsInR5cCI6ImF0K2p3dCJ9.eyJzdWIiOiJjbGlfY2FuYXJ5In0.c2lnbmF0dXJlLWNhbmFyeS0xMjM0"
	canarySecret = "bap_cs_CANARYsecretCANARYsecretCANARY0123456789"
	canaryPass   = "correct horse battery staple canary"
	canaryCookie = "sessionid=CANARYcookieVALUE42"
	canaryFill   = "4111 1111 1111 1111 canary"
	canaryHMAC   = "ory_rt_CANARYrefreshTOKENvalue00001.CANARYsignatureVALUE0000001"
)

func TestHandlerRedactsCanaries(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	secrets := &Secrets{}
	secrets.Add(canaryPass)
	log := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil), secrets))

	log.Info("token issued", "access_token", canaryJWT, "client", "cli_1")
	log.Info("header", "Authorization", "Bearer "+canaryJWT, "Cookie", canaryCookie, "Set-Cookie", canaryCookie)
	log.Info("free text mentions Bearer "+canaryJWT+" and "+canarySecret, "detail", "secret was "+canarySecret)
	log.Warn("failed", "err", errors.New("login failed for password "+canaryPass))
	log.Info("act", slog.Group("args", "action", "fill", "value", canaryFill), "values", []string{canaryFill})
	log.With("client_secret", canarySecret).Info("with attrs", "db_password", "hunter2hunter2")
	log.Info("dsn", "url", "postgres://bap:"+canaryPass+"@db.internal/bap")
	log.Info("map", "form", map[string]any{"refresh_token": canaryHMAC, "grant_type": "refresh_token"})
	log.Info("struct", "req", struct{ Secret string }{canarySecret})
	log.Info("opaque", "raw", canaryHMAC)
	log.Info("dsn", "conn", "host=/tmp port=5432 user=bap password=hunter3hunter3 dbname=bap")
	log.Info("form", "body", "grant_type=client_credentials&client_secret=s3cr3tvalue99&scope=x")

	out := buf.String()
	for _, c := range []string{canaryJWT, canarySecret, canaryPass, canaryCookie, canaryFill, canaryHMAC, "hunter2hunter2", "hunter3hunter3", "s3cr3tvalue99",
		"c2lnbmF0dXJlLWNhbmFyeS0xMjM0", "CANARYcookieVALUE42"} {
		if strings.Contains(out, c) {
			t.Errorf("log contains canary %q:\n%s", c, out)
		}
	}
	for _, keep := range []string{`"client":"cli_1"`, `"action":"fill"`, `"grant_type":"refresh_token"`, "db.internal/bap"} {
		if !strings.Contains(out, keep) {
			t.Errorf("log lost harmless value %s:\n%s", keep, out)
		}
	}
}

func TestIsProtectedKey(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"password": true, "Client-Secret": true, "X-Api-Token": true, "authorization": true, "value": true,
		"operation": false, "task_id": false, "status": false, "path": false, "msg": false, "tokens_issued_total": false,
	} {
		if got := IsProtectedKey(key); got != want {
			t.Errorf("IsProtectedKey(%q) = %v, want %v", key, got, want)
		}
	}
}
