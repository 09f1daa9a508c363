package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

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

// SessionCookie is the dashboard's session cookie, set by its token login
// (/login): a browser that signed in with the token opens the dashboard
// without a client certificate or an Authorization header.
const SessionCookie = "pfedmma_session"

// SessionTTL is how long a dashboard session lasts.
const SessionTTL = 12 * time.Hour

// sessionValue is the session cookie's value for token expiring at exp:
// "EXP.HMAC", the HMAC-SHA256 of the expiry under the token, so that no
// state is kept and a new token ends every session.
func sessionValue(token string, exp int64) string {
	mac := hmac.New(sha256.New, []byte(token))
	fmt.Fprintf(mac, "pfedmma dashboard session until %d", exp)
	return strconv.FormatInt(exp, 10) + "." + hex.EncodeToString(mac.Sum(nil))
}

// validSession reports whether v is a session cookie for token that has
// not expired at now.
func validSession(token, v string, now time.Time) bool {
	s, _, ok := strings.Cut(v, ".")
	exp, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil || now.Unix() >= exp || exp > now.Add(SessionTTL).Unix() {
		return false
	}
	return hmac.Equal([]byte(v), []byte(sessionValue(token, exp)))
}

// operatorsOnly lets through /healthz, requests with a verified operator
// certificate (certs.AddOperator) and, when token is set, requests with
// "Authorization: Bearer TOKEN" or the session cookie of the token login
// (/login, which it serves); it sends a browser asking for the page to
// the login and answers 401 to the rest. open (the clear-text
// --insecure-dev mode without a token) lets everything through.
func operatorsOnly(next http.Handler, token string, open bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.URL.Path == "/login" {
			login(w, r, token)
			return
		}
		switch {
		case open, r.URL.Path == "/healthz":
		case token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) == 1:
		case token != "" && hasSession(r, token):
		case r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && certs.IsOperator(r.TLS.VerifiedChains[0][0]):
		case token != "" && r.Method == http.MethodGet && r.URL.Path == "/":
			http.Redirect(w, r, "login", http.StatusSeeOther)
			return
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="pfedmma"`)
			http.Error(w, "an operator certificate (pfedmma certs add-operator), the bearer token (--http-token-file) or a session from /login is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func hasSession(r *http.Request, token string) bool {
	c, err := r.Cookie(SessionCookie)
	return err == nil && validSession(token, c.Value, time.Now())
}

// login serves the token login: GET shows the form, POST checks the token
// field and, when it is the token, sets the session cookie (HttpOnly,
// SameSite=Strict, Secure over TLS) and sends the browser to the page.
func login(w http.ResponseWriter, r *http.Request, token string) {
	switch r.Method {
	case http.MethodGet:
		dashboard.LoginPage(w, http.StatusOK, "")
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "/login: GET or POST", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		dashboard.LoginPage(w, http.StatusBadRequest, "the form could not be read")
		return
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(r.PostForm.Get("token"))), []byte(token)) != 1 {
		time.Sleep(250 * time.Millisecond) // slows guessing
		dashboard.LoginPage(w, http.StatusUnauthorized, "That is not the dashboard's token.")
		return
	}
	exp := time.Now().Add(SessionTTL).Unix()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: sessionValue(token, exp), Path: "/", MaxAge: int(SessionTTL.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "./", http.StatusSeeOther)
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
