package transport

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/tensor"
)

// BenchmarkSecureRound measures a networked round of pFedMMA's shared
// tensors at the paper's setting (three 32×32 projections and their
// biases: 3168 values) with no-op sites, over mTLS on loopback, with and
// without secure aggregation: the protocol's cost per round (wall time on
// this machine, every site in this process) and the bytes the coordinator
// received per site and round.
func BenchmarkSecureRound(b *testing.B) {
	for _, n := range []int{10, 100} {
		dir := certDir(b, n)
		init, spec := tensor.Named{}, Spec{}
		for _, j := range []int{10, 11, 12} {
			w, bias := fmt.Sprintf("shared.%d.weight", j), fmt.Sprintf("shared.%d.bias", j)
			init[w], init[bias] = tensor.New(32, 32), tensor.New(32)
			spec[w], spec[bias] = []int{32, 32}, []int{32}
		}
		for _, secure := range []bool{false, true} {
			b.Run(fmt.Sprintf("sites=%d/secure=%v", n, secure), func(b *testing.B) {
				const rounds = 3
				var total time.Duration
				var in float64
				for range b.N {
					strat := &strategy.FedAvg{Shared: federation.Prefix("shared."), Initial: init}
					d, bytes := secBenchFed(b, dir, n, rounds, strat, spec, secure)
					total += d
					in += bytes
				}
				b.ReportMetric(float64(total.Milliseconds())/float64(b.N*rounds), "ms/round")
				b.ReportMetric(in/float64(b.N*rounds*n), "B-in/site/round")
			})
		}
	}
}

// secBenchFed is benchFed with secure aggregation on or off; it returns
// the wall time and the bytes the coordinator received in updates.
func secBenchFed(b *testing.B, dir string, n, rounds int, strat federation.Strategy, spec Spec, secure bool) (time.Duration, float64) {
	b.Helper()
	sites, err := certs.Sites(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	coord := &federation.Coordinator{Strategy: strat, Rounds: rounds, Fraction: 1, Seed: 1, Parallel: n, EvalEvery: 1 << 30, Logger: quietLogger()}
	if secure {
		coord.Secure = simulatedSecure()
	}
	ready := make(chan *Server)
	done := make(chan error, 1)
	var addr string
	go func() {
		_, err := RunCoordinator(ctx, CoordinatorConfig{Addr: "127.0.0.1:0", CertsDir: dir, Sites: sites[:n],
			StatePath: filepath.Join(b.TempDir(), "c.db"), Spec: spec, PollWait: 5 * time.Second, Heartbeat: 5 * time.Second,
			Linger: time.Millisecond, Logger: quietLogger(),
			Ready: func(g, _ string, s *Server) { addr = g; ready <- s }}, coord)
		done <- err
	}()
	srv := <-ready
	for i := range n {
		tc, err := certs.SiteTLS(dir, sites[i], "")
		if err != nil {
			b.Fatal(err)
		}
		r := &SiteRunner{Addr: addr, TLS: tc, Name: sites[i], Site: echo{i}, Logger: quietLogger()}
		go r.Run(ctx)
	}
	t0 := time.Now()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return time.Since(t0), counterValue(srv)
}

// counterValue is the update bytes the coordinator received.
func counterValue(s *Server) float64 {
	var m dto.Metric
	if err := s.Metrics().WireIn.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
