package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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

// Protect lets through to next /healthz, requests that operator accepts
// (a verified operator certificate; nil: none) and, when token is set,
// requests with "Authorization: Bearer TOKEN" or the session cookie of
// the token login (/login, which it serves); it sends a browser asking
// for the page to the login and answers 401 to the rest. open (clear text
// without a token, for development) lets everything through.
func Protect(next http.Handler, token string, open bool, operator func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.URL.Path == "/login" {
			login(w, r, token)
			return
		}
		switch {
		case open, r.URL.Path == "/healthz":
		case token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) == 1:
		case token != "" && hasSession(r, token):
		case operator != nil && operator(r):
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
		LoginPage(w, http.StatusOK, "")
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "/login: GET or POST", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		LoginPage(w, http.StatusBadRequest, "the form could not be read")
		return
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(r.PostForm.Get("token"))), []byte(token)) != 1 {
		time.Sleep(250 * time.Millisecond) // slows guessing
		LoginPage(w, http.StatusUnauthorized, "That is not the dashboard's token.")
		return
	}
	exp := time.Now().Add(SessionTTL).Unix()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: sessionValue(token, exp), Path: "/", MaxAge: int(SessionTTL.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "./", http.StatusSeeOther)
}
