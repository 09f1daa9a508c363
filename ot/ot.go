// Package ot solves batches of small entropic optimal-transport problems —
// FedOTP's unbalanced "COT" and balanced Sinkhorn iterations, as the FedOTP
// authors' code states them — in the log domain, so that a small entropic
// regulariser (ε = 0.01, where exp(−cost/ε) underflows float32) gives the
// same plan as the iterations run in float64.
//
// Each problem p of a batch has a similarity matrix S_p [M, N], cost
// 1 − S and Gibbs kernel K = exp(−(1 − S)/ε). With a = 1/M (per row) and
// b = top/N (COT, top = min(P, top_percent)) or b = 1/N (Sinkhorn), the
// authors' iterations from u = v = 1 are
//
//	COT:      u ← min(a / (K v), 1),  v ← b / (Kᵀ u),  err = mean|v − v_prev|
//	Sinkhorn: u ← a / (K v),          v ← b / (Kᵀ u),  err = mean|u − u_prev|
//
// where the mean runs over the whole batch; they stop once err < thresh or
// after max_iter iterations, and the plan is diag(u) K diag(v). Here
// f = log u and g = log v are iterated instead (log-sum-exp in float64), the
// stopping error is evaluated on exp(f), exp(g) in float64, and the plan is
// exp(f_m + g_n − cost_mn/ε). The plan is a constant for the caller: no
// gradient flows through it.
package ot

import (
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/nn"
)

// Methods of Config.Method.
const (
	COT      = "COT"      // unbalanced: rows capped at a, columns b = top/N
	Sinkhorn = "Sinkhorn" // balanced: rows a = 1/M, columns b = 1/N
)

// Config are the solver's settings (FedOTP's `OT`, `eps`, `thresh`,
// `max_iter`, `top_percent`).
type Config struct {
	Method     string  // COT or Sinkhorn
	Eps        float64 // entropic regulariser ε > 0
	Thresh     float64 // stop when the batch-mean change is below it
	MaxIter    int     // at most this many iterations (≥ 1)
	TopPercent float64 // COT: transported mass, in (0, 1]
}

// Validate reports the first invalid setting, naming its key.
func (c Config) Validate() error {
	switch {
	case c.Method != COT && c.Method != Sinkhorn:
		return fmt.Errorf("ot: %q is %q, want %q or %q", "ot", c.Method, COT, Sinkhorn)
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		return fmt.Errorf("ot: %q is %v, want > 0", "eps", c.Eps)
	case !(c.Thresh >= 0):
		return fmt.Errorf("ot: %q is %v, want ≥ 0", "thresh", c.Thresh)
	case c.MaxIter < 1:
		return fmt.Errorf("ot: %q is %d, want ≥ 1", "max_iter", c.MaxIter)
	case c.Method == COT && !(c.TopPercent > 0 && c.TopPercent <= 1):
		return fmt.Errorf("ot: %q is %v, want in (0, 1]", "top_percent", c.TopPercent)
	}
	return nil
}

// Solver keeps the potentials between calls (no allocation once grown).
// A Solver is not safe for concurrent use.
type Solver struct {
	f, g, prev []float64
	errs       []float64
}

// Result describes a solve.
type Result struct {
	Iters int     // iterations run
	Err   float64 // the last batch-mean change
}

// Plan writes the transport plans [P, M, N] for the similarities sim
// [P, M, N] (cost = 1 − sim) into plan.
func (s *Solver) Plan(plan, sim []float32, P, M, N int, c Config) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	if P < 1 || M < 1 || N < 1 {
		return Result{}, fmt.Errorf("ot: problem shape [%d, %d, %d] must be positive", P, M, N)
	}
	if len(sim) != P*M*N || len(plan) != P*M*N {
		return Result{}, fmt.Errorf("ot: sim has %d values and plan %d, want %d·%d·%d = %d", len(sim), len(plan), P, M, N, P*M*N)
	}
	for i, v := range sim {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return Result{}, fmt.Errorf("ot: sim[%d] is %v", i, v)
		}
	}
	s.f = grow64(s.f, P*M)
	s.g = grow64(s.g, P*N)
	clear(s.f) // u = 1
	clear(s.g) // v = 1
	cot := c.Method == COT
	logA := -math.Log(float64(M))
	logB := -math.Log(float64(N))
	nPrev := P * M // Sinkhorn watches u
	if cot {
		// the authors' top = min(Σ a, top_percent), Σ a over the batch = P
		logB += math.Log(math.Min(float64(P), c.TopPercent))
		nPrev = P * N // COT watches v
	}
	s.prev = grow64(s.prev, nPrev)
	inv := 1 / c.Eps
	s.errs = grow64(s.errs, P)
	var res Result
	for it := 0; it < c.MaxIter; it++ {
		nn.ParallelFor(P, 8, func(lo, hi int) {
			for p := lo; p < hi; p++ {
				S := sim[p*M*N : (p+1)*M*N]
				f, g := s.f[p*M:(p+1)*M], s.g[p*N:(p+1)*N]
				watch := f
				if cot {
					watch = g
				}
				prev := s.prev[p*len(watch) : (p+1)*len(watch)]
				copy(prev, watch)
				// f_m = log a − lse_n(L_mn + g_n), L = (S − 1)/ε; COT caps u at 1
				for m := 0; m < M; m++ {
					row := S[m*N : m*N+N]
					mx := math.Inf(-1)
					for n, x := range row {
						mx = math.Max(mx, (float64(x)-1)*inv+g[n])
					}
					var sum float64
					for n, x := range row {
						sum += math.Exp((float64(x)-1)*inv + g[n] - mx)
					}
					f[m] = logA - mx - math.Log(sum)
					if cot {
						f[m] = math.Min(f[m], 0)
					}
				}
				// g_n = log b − lse_m(L_mn + f_m)
				for n := 0; n < N; n++ {
					mx := math.Inf(-1)
					for m := 0; m < M; m++ {
						mx = math.Max(mx, (float64(S[m*N+n])-1)*inv+f[m])
					}
					var sum float64
					for m := 0; m < M; m++ {
						sum += math.Exp((float64(S[m*N+n])-1)*inv + f[m] - mx)
					}
					g[n] = logB - mx - math.Log(sum)
				}
				var e float64
				for i, x := range watch {
					e += math.Abs(math.Exp(x) - math.Exp(prev[i]))
				}
				s.errs[p] = e
			}
		})
		var e float64 // summed in problem order: independent of the threading
		for _, x := range s.errs {
			e += x
		}
		res = Result{Iters: it + 1, Err: e / float64(nPrev)}
		if res.Err < c.Thresh {
			break
		}
	}
	nn.ParallelFor(P, 8, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			f, g := s.f[p*M:(p+1)*M], s.g[p*N:(p+1)*N]
			for m := 0; m < M; m++ {
				for n := 0; n < N; n++ {
					i := (p*M+m)*N + n
					plan[i] = float32(math.Exp(f[m] + g[n] + (float64(sim[i])-1)*inv))
				}
			}
		}
	})
	return res, nil
}

func grow64(buf []float64, n int) []float64 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float64, n)
}
