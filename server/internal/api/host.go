package api

import (
	"net"
	"net/http"
	"strings"

	"github.com/originweave/bap/server/internal/app"
)

// LoopbackHostOnly refuses TCP requests whose Host header does not name a loopback address or
// `localhost`. Reaching 127.0.0.1 is the local profile's credential, and a web page that rebinds
// its own name to 127.0.0.1 (DNS rebinding) reaches it too — but its requests carry its own name
// as Host. Requests over the Unix socket are not affected: no browser can open one.
func LoopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if viaTCP(r) && !loopbackHost(r.Host) {
			writeProblem(w, &app.Error{Code: app.CodeInvalidRequest,
				Detail: "the local profile answers only requests addressed to a loopback host (127.0.0.1, [::1] or localhost)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// viaTCP reports whether the request arrived over TCP (a Unix socket peer has no host:port).
func viaTCP(r *http.Request) bool {
	_, _, err := net.SplitHostPort(r.RemoteAddr)
	return err == nil
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
