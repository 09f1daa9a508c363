// Package ot solves batches of small entropic optimal-transport problems —
// FedOTP's unbalanced "COT" and balanced Sinkhorn iterations, as the FedOTP
// authors' code states them — in a log-stabilised float64 form, so that a
// small entropic regulariser (ε = 0.01, where exp(−cost/ε) underflows float32) gives the
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
// after max_iter iterations, and the plan is diag(u) K diag(v). Here the
// iterations run in float64 in a stabilised form: u = exp(f)·ũ,
// v = exp(g)·ṽ with the absorbed kernel K̃ = exp(−cost/ε + f ⊕ g); the
// first iteration, and any iteration in which ũ or ṽ would leave
// [1e-30, 1e30], runs in the log domain (log-sum-exp) and absorbs the
// scalings into f and g. In exact arithmetic every iteration equals the
// authors' one, so the plan equals their iterations run in float64 (also at
// ε = 0.01, where their float32 kernel underflows and the plan becomes NaN);
// the stopping change is computed on u, v themselves. The plan is a
// constant for the caller: no gradient flows through it.
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
	case !(c.Thresh >= 0) || math.IsInf(c.Thresh, 0):
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
	f, g, u, v, su, sv, ea, eb []float64
	k, prev, errs              []float64
}

// problem is one M×N problem in the stabilised form: u = exp(f)·ũ,
// v = exp(g)·ṽ, with the absorbed kernel K̃ = exp(L + f ⊕ g), L = (S − 1)/ε.
// Plain scaling steps on (ũ, ṽ) need no exponentials; when ũ or ṽ leave
// [1e-30, 1e30] (or K̃ underflows) the step is redone in the log domain and
// the scalings are absorbed into f, g again.
type problem struct {
	S              []float32 // similarities [M, N]
	K              []float64 // K̃ [M, N]
	f, g, u, v     []float64 // log potentials and scalings ũ [M], ṽ [N]
	su, sv, ea, eb []float64 // saved ũ, ṽ; exp(f), exp(g)
	M, N           int
	a, b, inv      float64
	cot            bool
}

// watch writes the watched scaling in the original domain (COT: v,
// Sinkhorn: u) into dst and returns it.
func (p *problem) watch(dst []float64) []float64 {
	if p.cot {
		for n := range dst {
			dst[n] = p.eb[n] * p.v[n]
		}
	} else {
		for m := range dst {
			dst[m] = p.ea[m] * p.u[m]
		}
	}
	return dst
}

// scaledStep runs one iteration on ũ, ṽ; it reports false (restoring them)
// when a value leaves the safe range.
func (p *problem) scaledStep() bool {
	const lo, hi = 1e-30, 1e30
	M, N := p.M, p.N
	copy(p.su, p.u)
	copy(p.sv, p.v)
	ok := true
	// ũ_m = a / Σ_n K̃_mn ṽ_n; COT caps u = exp(f)·ũ at 1
	for m := 0; m < M && ok; m++ {
		var kv float64
		for n := 0; n < N; n++ {
			kv += p.K[m*N+n] * p.v[n]
		}
		x := p.a / kv
		if p.cot {
			x = math.Min(x, 1/p.ea[m])
		}
		p.u[m] = x
		ok = x >= lo && x <= hi
	}
	// ṽ_n = b / Σ_m K̃_mn ũ_m
	for n := 0; n < N && ok; n++ {
		var ku float64
		for m := 0; m < M; m++ {
			ku += p.K[m*N+n] * p.u[m]
		}
		x := p.b / ku
		p.v[n] = x
		ok = x >= lo && x <= hi
	}
	if !ok {
		copy(p.u, p.su)
		copy(p.v, p.sv)
	}
	return ok
}

// logStep runs one iteration in the log domain from f + log ũ, g + log ṽ
// and absorbs the result: f, g are the new log potentials, ũ = ṽ = 1, and
// K̃, exp(f), exp(g) are recomputed.
func (p *problem) logStep() {
	M, N, inv := p.M, p.N, p.inv
	for n := 0; n < N; n++ {
		p.g[n] += math.Log(p.v[n])
		p.v[n] = 1
	}
	// f_m = log a − lse_n(L_mn + g_n); COT caps u at 1
	la, lb := math.Log(p.a), math.Log(p.b)
	for m := 0; m < M; m++ {
		row := p.S[m*N : m*N+N]
		mx := math.Inf(-1)
		for n, x := range row {
			mx = math.Max(mx, (float64(x)-1)*inv+p.g[n])
		}
		var sum float64
		for n, x := range row {
			sum += math.Exp((float64(x)-1)*inv + p.g[n] - mx)
		}
		p.f[m] = la - mx - math.Log(sum)
		if p.cot {
			p.f[m] = math.Min(p.f[m], 0)
		}
		p.u[m] = 1
	}
	// g_n = log b − lse_m(L_mn + f_m)
	for n := 0; n < N; n++ {
		mx := math.Inf(-1)
		for m := 0; m < M; m++ {
			mx = math.Max(mx, (float64(p.S[m*N+n])-1)*inv+p.f[m])
		}
		var sum float64
		for m := 0; m < M; m++ {
			sum += math.Exp((float64(p.S[m*N+n])-1)*inv + p.f[m] - mx)
		}
		p.g[n] = lb - mx - math.Log(sum)
	}
	for m := 0; m < M; m++ {
		p.ea[m] = math.Exp(p.f[m])
		for n := 0; n < N; n++ {
			p.K[m*N+n] = math.Exp((float64(p.S[m*N+n])-1)*inv + p.f[m] + p.g[n])
		}
	}
	for n := 0; n < N; n++ {
		p.eb[n] = math.Exp(p.g[n])
	}
}

// Result describes a solve.
type Result struct {
	Iters int     // iterations run
	Err   float64 // the last batch-mean change
}

// Plan writes the transport plans [P, M, N] for the similarities sim
// [P, M, N] (cost = 1 − sim) into plan.
func (s *Solver) Plan(plan, sim []float32, P, M, N int, c Config) (Result, error) {
	if err := checkProblem(plan, sim, P, M, N, c); err != nil {
		return Result{}, err
	}
	s.reset(P, M, N)
	cot := c.Method == COT
	a, b := 1/float64(M), 1/float64(N)
	nWatch := M // Sinkhorn watches u
	if cot {
		// the authors' top = min(Σ a, top_percent), Σ a over the batch = P
		b *= math.Min(float64(P), c.TopPercent)
		nWatch = N // COT watches v
	}
	s.prev = grow64(s.prev, P*nWatch)
	inv := 1 / c.Eps
	s.errs = grow64(s.errs, P)
	var res Result
	for it := 0; it < c.MaxIter; it++ {
		nn.ParallelFor(P, 8, func(lo, hi int) {
			for p := lo; p < hi; p++ {
				pr := problem{
					S: sim[p*M*N : (p+1)*M*N], K: s.k[p*M*N : (p+1)*M*N],
					f: s.f[p*M : (p+1)*M], g: s.g[p*N : (p+1)*N],
					u: s.u[p*M : (p+1)*M], v: s.v[p*N : (p+1)*N],
					su: s.su[p*M : (p+1)*M], sv: s.sv[p*N : (p+1)*N],
					ea: s.ea[p*M : (p+1)*M], eb: s.eb[p*N : (p+1)*N],
					M: M, N: N, a: a, b: b, inv: inv, cot: cot,
				}
				prev := s.prev[p*nWatch : (p+1)*nWatch]
				pr.watch(prev)
				if it == 0 || !pr.scaledStep() {
					pr.logStep()
				}
				var e float64
				now := pr.su[:0] // the step is done: su/sv are free scratch
				if cot {
					now = pr.sv[:0]
				}
				now = pr.watch(now[:nWatch])
				for i, x := range now {
					e += math.Abs(x - prev[i])
				}
				s.errs[p] = e
			}
		})
		var e float64 // summed in problem order: independent of the threading
		for _, x := range s.errs {
			e += x
		}
		res = Result{Iters: it + 1, Err: e / float64(P*nWatch)}
		if res.Err < c.Thresh {
			break
		}
	}
	s.writePlan(plan, P, M, N)
	return res, nil
}

// checkProblem refuses an invalid configuration, a non-positive shape,
// buffers of the wrong length and a non-finite similarity.
func checkProblem(plan, sim []float32, P, M, N int, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if P < 1 || M < 1 || N < 1 {
		return fmt.Errorf("ot: problem shape [%d, %d, %d] must be positive", P, M, N)
	}
	if len(sim) != P*M*N || len(plan) != P*M*N {
		return fmt.Errorf("ot: sim has %d values and plan %d, want %d·%d·%d = %d", len(sim), len(plan), P, M, N, P*M*N)
	}
	for i, v := range sim {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("ot: sim[%d] is %v", i, v)
		}
	}
	return nil
}

// reset sizes the solver's buffers for P problems of M×N and starts the
// scalings at 1 (f = g = 0, u = v = 1).
func (s *Solver) reset(P, M, N int) {
	s.f, s.g = grow64(s.f, P*M), grow64(s.g, P*N)
	s.u, s.v = grow64(s.u, P*M), grow64(s.v, P*N)
	s.su, s.sv = grow64(s.su, P*M), grow64(s.sv, P*N)
	s.ea, s.eb = grow64(s.ea, P*M), grow64(s.eb, P*N)
	s.k = grow64(s.k, P*M*N)
	clear(s.f) // u = exp(f)·ũ = 1
	clear(s.g) // v = exp(g)·ṽ = 1
	for _, x := range [][]float64{s.u, s.v, s.ea, s.eb} {
		for i := range x {
			x[i] = 1
		}
	}
}

// writePlan writes plan = diag(u) K diag(v) = K̃ ũ ṽ.
func (s *Solver) writePlan(plan []float32, P, M, N int) {
	for p := 0; p < P; p++ {
		for m := 0; m < M; m++ {
			for n := 0; n < N; n++ {
				i := (p*M+m)*N + n
				plan[i] = float32(s.k[i] * s.u[p*M+m] * s.v[p*N+n])
			}
		}
	}
}

func grow64(buf []float64, n int) []float64 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float64, n)
}
