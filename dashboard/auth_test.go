package dashboard

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTokenLogin: without credentials the page sends a browser to the
// login and the API answers 401; a wrong token sets no cookie; the token
// sets an HttpOnly, SameSite=Strict session cookie that opens the page,
// the API and /metrics; a forged, expired or other token's cookie opens
// nothing; the bearer header still works.
func TestTokenLogin(t *testing.T) {
	src := newFake()
	ts := httptest.NewServer(Protect(Handler(src, NewMetrics()), testToken, false, nil))
	defer ts.Close()
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	plain := &http.Client{CheckRedirect: noRedirect, Timeout: 10 * time.Second}
	do := func(cli *http.Client, method, path string, body url.Values, cookie *http.Cookie, bearer string) *http.Response {
		t.Helper()
		var rd io.Reader
		if body != nil {
			rd = strings.NewReader(body.Encode())
		}
		req, _ := http.NewRequest(method, ts.URL+path, rd)
		if body != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := cli.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := do(plain, "GET", "/", nil, nil, ""); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/login" {
		t.Fatalf("GET / without credentials: %s to %q, want 303 to /login", r.Status, r.Header.Get("Location"))
	}
	for _, p := range []string{"/api/status", "/api/log", "/metrics"} {
		if r := do(plain, "GET", p, nil, nil, ""); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %s, want 401", p, r.Status)
		}
	}
	if r := do(plain, "GET", "/healthz", nil, nil, ""); r.StatusCode != 200 {
		t.Errorf("/healthz: %s", r.Status)
	}
	if r := do(plain, "GET", "/login", nil, nil, ""); r.StatusCode != 200 {
		t.Errorf("GET /login: %s", r.Status)
	}
	r := do(plain, "POST", "/login", url.Values{"token": {testToken + "x"}}, nil, "")
	if r.StatusCode != http.StatusUnauthorized || len(r.Cookies()) != 0 {
		t.Fatalf("a wrong token: %s with %d cookies, want 401 and none", r.Status, len(r.Cookies()))
	}
	r = do(plain, "POST", "/login", url.Values{"token": {testToken}}, nil, "")
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 {
		t.Fatalf("the token: %s with %d cookies, want 303 and a session cookie", r.Status, len(r.Cookies()))
	}
	c := r.Cookies()[0]
	if c.Name != SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge <= 0 {
		t.Errorf("session cookie %+v: want %s, HttpOnly, SameSite=Strict, Path=/", c, SessionCookie)
	}
	for _, p := range []string{"/", "/api/status", "/api/log", "/metrics"} {
		if r := do(plain, "GET", p, nil, c, ""); r.StatusCode != 200 {
			t.Errorf("GET %s with the session: %s, want 200", p, r.Status)
		}
		if r := do(plain, "GET", p, nil, nil, testToken); r.StatusCode != 200 {
			t.Errorf("GET %s with the bearer token: %s, want 200", p, r.Status)
		}
	}
	exp, mac, _ := strings.Cut(c.Value, ".")
	n, _ := strconv.ParseInt(exp, 10, 64)
	past := time.Now().Add(-time.Minute).Unix()
	for name, v := range map[string]string{
		"a later expiry with the same MAC": strconv.FormatInt(n+3600, 10) + "." + mac,
		"a flipped MAC":                    exp + "." + flip(mac),
		"an expired session":               sessionValue(testToken, past),
		"another token's session":          sessionValue("another-token-0123456789", n),
		"a session beyond its lifetime":    sessionValue(testToken, time.Now().Add(SessionTTL+time.Hour).Unix()),
		"garbage":                          "garbage",
	} {
		if r := do(plain, "GET", "/api/status", nil, &http.Cookie{Name: SessionCookie, Value: v}, ""); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %s, want 401", name, r.Status)
		}
	}
	// a browser-like client: login, then follow the redirect to the page
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	if r := do(browser, "POST", "/login", url.Values{"token": {testToken}}, nil, ""); r.StatusCode != 200 || r.Request.URL.Path != "/" {
		t.Errorf("login then redirect: %s at %s, want 200 at /", r.Status, r.Request.URL.Path)
	}
}

func flip(hex string) string {
	b := []byte(hex)
	if b[0] == '0' {
		b[0] = '1'
	} else {
		b[0] = '0'
	}
	return string(b)
}
