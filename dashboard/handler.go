package dashboard

import (
	"embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed static/index.html
var static embed.FS

// Handler serves the dashboard routes (see the package comment) for src
// and m.
func Handler(src Source, m *Metrics) http.Handler {
	mux := http.NewServeMux()
	page, _ := static.ReadFile("static/index.html")
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
		w.Write(page)
	})
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(withoutEvents(src.Status()))
	})
	mux.HandleFunc("GET /api/log", func(w http.ResponseWriter, r *http.Request) { eventLog(w, r, src) })
	mux.HandleFunc("GET /api/events", func(w http.ResponseWriter, r *http.Request) { events(w, r, src) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// events streams the status as server-sent events: at once, after every
// change (at most 10 a second) and every 2 s (last-contact ages move on).
func events(w http.ResponseWriter, r *http.Request, src Source) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	ch, stop := src.Subscribe()
	defer stop()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		js, err := json.Marshal(withoutEvents(src.Status()))
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: status\ndata: %s\n\n", js); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-ch:
			time.Sleep(100 * time.Millisecond)
		case <-tick.C:
		}
	}
}

// withoutEvents is st with its events counted, not listed (the page asks
// /api/log for a page of them).
func withoutEvents(st Status) Status {
	st.EventCount = len(st.Events)
	st.Events = nil
	return st
}

// eventLog answers /api/log: a page of the events (EventQuery from the
// query string: kind, site, q, offset, limit ≤ 500, order=oldest).
func eventLog(w http.ResponseWriter, r *http.Request, src Source) {
	v := r.URL.Query()
	q := EventQuery{Kind: v.Get("kind"), Site: v.Get("site"), Text: v.Get("q"), Oldest: v.Get("order") == "oldest", Limit: 25}
	for _, p := range []struct {
		key string
		dst *int
		max int
	}{{"offset", &q.Offset, 1 << 30}, {"limit", &q.Limit, 500}} {
		s := v.Get(p.key)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > p.max {
			http.Error(w, fmt.Sprintf("/api/log: %s=%q: want a whole number in [0, %d]", p.key, s, p.max), http.StatusBadRequest)
			return
		}
		*p.dst = n
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(QueryEvents(src.Status().Events, q))
}

//go:embed static/login.html
var loginHTML string

// LoginPage writes the token login form with status code and message msg
// (may be empty), for the authentication in front of Handler.
func LoginPage(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	io.WriteString(w, strings.Replace(loginHTML, "{{MSG}}", html.EscapeString(msg), 1))
}
