package transport

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/dashboard"
)

// HTTPListenAddr resolves the dashboard's --http address: a bare port
// ("7444" or ":7444") means loopback (127.0.0.1:7444); any other interface
// must be named ("0.0.0.0:7444", "10.0.0.5:7444").
func HTTPListenAddr(addr string) (string, error) {
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("--http %q: want PORT or HOST:PORT", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// ReadToken reads a bearer token file (--http-token-file): its content,
// trimmed, which must be at least 16 characters.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--http-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("--http-token-file %s: the token must be at least 16 characters", path)
	}
	return tok, nil
}

// operatorsOnly lets through /healthz, requests with a verified operator
// certificate (certs.AddOperator) and, when token is set, the bearer token
// or a session of the token login (dashboard.Protect); it answers 401 to
// the rest. open (the clear-text --insecure-dev mode without a token) lets
// everything through.
func operatorsOnly(next http.Handler, token string, open bool) http.Handler {
	return dashboard.Protect(next, token, open, func(r *http.Request) bool {
		return r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && certs.IsOperator(r.TLS.VerifiedChains[0][0])
	})
}

// checkDeclared refuses an upload whose example count differs from the
// count the site declared when it registered (the aggregation's weight).
func (s *Server) checkDeclared(st *siteState, n int64) *refusal {
	s.mu.Lock()
	declared := st.numExamples
	s.mu.Unlock()
	if int64(declared) != n {
		return refuse(ReasonExamples, "upload of site %q claims %d examples, the site registered %d", st.name, n, declared)
	}
	return nil
}
