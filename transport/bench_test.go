package transport

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

// echo is a no-op participant: it uploads what it received.
type echo struct{ id int }

func (e echo) ID() int          { return e.id }
func (e echo) NumExamples() int { return 10 }
func (e echo) Fit(_ context.Context, ins federation.FitIns) (federation.FitRes, error) {
	return federation.FitRes{Params: ins.Params.Clone(), NumExamples: 10}, nil
}
func (e echo) Evaluate(context.Context, federation.EvaluateIns) (federation.EvaluateRes, error) {
	return federation.EvaluateRes{Metrics: map[string]float64{"acc": 1}, NumExamples: 10}, nil
}

// benchFed runs one networked federation (mTLS on loopback) of n sites
// over rounds rounds and returns its wall time.
func benchFed(b *testing.B, dir string, n, rounds, evalEvery int, strat federation.Strategy, spec Spec,
	site func(i int) federation.ClientProxy, onRound func(federation.RoundReport)) time.Duration {
	b.Helper()
	sites, err := certs.Sites(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	coord := &federation.Coordinator{Strategy: strat, Rounds: rounds, Fraction: 1, Seed: 1, Parallel: n, EvalEvery: evalEvery,
		Logger: quietLogger(), OnRound: func(r federation.RoundReport) error {
			if onRound != nil {
				onRound(r)
			}
			return nil
		}}
	ready := make(chan string)
	done := make(chan error, 1)
	var t0 time.Time
	go func() {
		_, err := RunCoordinator(ctx, CoordinatorConfig{Addr: "127.0.0.1:0", CertsDir: dir, Sites: sites[:n],
			StatePath: filepath.Join(b.TempDir(), "c.db"), Spec: spec, PollWait: 5 * time.Second, Heartbeat: 5 * time.Second,
			Linger: time.Millisecond, Logger: quietLogger(),
			Ready: func(g, _ string, s *Server) { ready <- g }}, coord)
		done <- err
	}()
	addr := <-ready
	for i := range n {
		tc, err := certs.SiteTLS(dir, sites[i], "")
		if err != nil {
			b.Fatal(err)
		}
		r := &SiteRunner{Addr: addr, TLS: tc, Name: sites[i], Site: site(i), Logger: quietLogger()}
		go r.Run(ctx)
	}
	// the clock starts once every site registered (the first round's tasks)
	t0 = time.Now()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

func certDir(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	var sites []string
	for i := range n {
		sites = append(sites, "site-"+strconv.Itoa(i))
	}
	if err := certs.Init(dir, sites, nil); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkRoundOverhead measures the transport's cost of a round of
// pFedMMA's shared tensors at ViT-B/16 shapes (three 32×32 float32
// projections) with 10 no-op sites: everything but local training.
func BenchmarkRoundOverhead(b *testing.B) {
	const n, rounds = 10, 50
	dir := certDir(b, n)
	names := []string{"shared.proj.10", "shared.proj.11", "shared.proj.12"}
	init, spec := tensor.Named{}, Spec{}
	for _, k := range names {
		init[k] = tensor.New(32, 32)
		spec[k] = []int{32, 32}
	}
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		strat := &strategy.FedAvg{Shared: federation.Prefix("shared."), Initial: init}
		total += benchFed(b, dir, n, rounds, 1<<30, strat, spec, func(i int) federation.ClientProxy { return echo{i} }, nil)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N*rounds), "ms/round")
}

// BenchmarkUpload6MiB exercises chunking: two sites exchange a 6 MiB tensor
// every round.
func BenchmarkUpload6MiB(b *testing.B) {
	const n, rounds = 2, 5
	dir := certDir(b, n)
	init := tensor.Named{"shared.big": tensor.New(1536, 1024)}
	b.SetBytes(int64(2 * n * rounds * 4 * 1536 * 1024))
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		strat := &strategy.FedAvg{Shared: federation.Prefix("shared."), Initial: init}
		total += benchFed(b, dir, n, rounds, 1<<30, strat, Spec{"shared.big": {1536, 1024}}, func(i int) federation.ClientProxy { return echo{i} }, nil)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N*rounds), "ms/round")
}

// BenchmarkLoad200Sites runs 200 toy sites (goroutines, each with its own
// mTLS gRPC connection) for 5 rounds; it reports rounds/s and the peak RSS
// of the process (coordinator and sites together), and fails when the
// coordinator's heap grows from round to round.
func BenchmarkLoad200Sites(b *testing.B) {
	const n, rounds = 200, 5
	dir := certDir(b, n)
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		var heaps []uint64
		total += benchFed(b, dir, n, rounds, 1, toy.Strategy(), toy.Spec(), func(i int) federation.ClientProxy {
			return federation.NewSite(toy.New(i), "")
		}, func(federation.RoundReport) {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heaps = append(heaps, ms.HeapAlloc)
		})
		b.Logf("heap after each round (MiB): %v", mib(heaps))
		if len(heaps) != rounds {
			b.Fatalf("%d of %d rounds completed", len(heaps), rounds)
		}
		if heaps[rounds-1] > 2*heaps[1] {
			b.Fatalf("heap grows: %v MiB", mib(heaps))
		}
	}
	b.ReportMetric(float64(b.N*rounds)/total.Seconds(), "rounds/s")
	b.ReportMetric(peakRSS(), "peakRSS_MiB")
}

func mib(v []uint64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.1f", float64(x)/(1<<20))
	}
	return out
}

// peakRSS reads VmHWM from /proc/self/status, in MiB (0 when unknown).
func peakRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
