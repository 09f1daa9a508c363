package ot

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/pfedmma/pfedmma/safetensors"
)

func randSim(rng *rand.Rand, n int, lo, hi float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = lo + (hi-lo)*rng.Float32()
	}
	return s
}

// sums returns the row sums [P, M] and column sums [P, N] of plans [P, M, N].
func sums(plan []float32, P, M, N int) (rows, cols []float64) {
	rows, cols = make([]float64, P*M), make([]float64, P*N)
	for p := 0; p < P; p++ {
		for m := 0; m < M; m++ {
			for n := 0; n < N; n++ {
				v := float64(plan[(p*M+m)*N+n])
				rows[p*M+m] += v
				cols[p*N+n] += v
			}
		}
	}
	return rows, cols
}

func TestUniformCostGivesUniformPlan(t *testing.T) {
	const P, M, N = 3, 7, 2
	sim := make([]float32, P*M*N)
	for i := range sim {
		sim[i] = 0.3
	}
	for _, c := range []Config{
		{Method: Sinkhorn, Eps: 0.1, Thresh: 1e-6, MaxIter: 100},
		{Method: COT, Eps: 0.1, Thresh: 1e-6, MaxIter: 100, TopPercent: 0.8},
		{Method: COT, Eps: 0.01, Thresh: 1e-6, MaxIter: 100, TopPercent: 1},
	} {
		var s Solver
		plan := make([]float32, P*M*N)
		if _, err := s.Plan(plan, sim, P, M, N, c); err != nil {
			t.Fatal(err)
		}
		want := 1 / float64(M*N)
		if c.Method == COT {
			want *= c.TopPercent
		}
		for i, v := range plan {
			if math.Abs(float64(v)-want) > 1e-6*want {
				t.Fatalf("%+v: plan[%d] = %v, want %v", c, i, v, want)
			}
		}
	}
}

func TestMarginals(t *testing.T) {
	const P, M, N = 5, 16, 3
	rng := rand.New(rand.NewPCG(1, 2))
	for _, eps := range []float64{0.1, 0.01, 0.001} {
		sim := randSim(rng, P*M*N, -0.2, 0.6)
		for _, method := range []string{Sinkhorn, COT} {
			c := Config{Method: method, Eps: eps, Thresh: 1e-4, MaxIter: 1000, TopPercent: 0.8}
			var s Solver
			plan := make([]float32, P*M*N)
			res, err := s.Plan(plan, sim, P, M, N, c)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range plan {
				if math.IsNaN(float64(v)) || v < 0 {
					t.Fatalf("%s ε %v: plan[%d] = %v", method, eps, i, v)
				}
			}
			rows, cols := sums(plan, P, M, N)
			if method == Sinkhorn {
				// the last update fits the columns exactly; the rows move by
				// at most the stopping change
				for i, v := range cols {
					if math.Abs(v-1/float64(N)) > 1e-6 {
						t.Errorf("Sinkhorn ε %v: column sum %d = %v, want %v", eps, i, v, 1/float64(N))
					}
				}
				if res.Iters < c.MaxIter {
					for i, v := range rows {
						if math.Abs(v-1/float64(M)) > 10*c.Thresh {
							t.Errorf("Sinkhorn ε %v: row sum %d = %v, want %v (after %d iterations)", eps, i, v, 1/float64(M), res.Iters)
						}
					}
				}
				continue
			}
			// COT: every plan carries top_percent; rows stay within a = 1/M
			for p := 0; p < P; p++ {
				var tot float64
				for n := 0; n < N; n++ {
					tot += cols[p*N+n]
					if math.Abs(cols[p*N+n]-c.TopPercent/float64(N)) > 1e-6 {
						t.Errorf("COT ε %v: column sum [%d,%d] = %v, want %v", eps, p, n, cols[p*N+n], c.TopPercent/float64(N))
					}
				}
				if math.Abs(tot-c.TopPercent) > 1e-6 {
					t.Errorf("COT ε %v: plan %d sums to %v, want %v", eps, p, tot, c.TopPercent)
				}
			}
			if res.Iters < c.MaxIter {
				for i, v := range rows {
					if v > 1/float64(M)+10*c.Thresh {
						t.Errorf("COT ε %v: row sum %d = %v above a = %v", eps, i, v, 1/float64(M))
					}
				}
			}
		}
	}
}

// TestFloat64Iterations checks the log-domain solver against the authors'
// iterations run in float64 at ε = 0.1, where they do not underflow.
func TestFloat64Iterations(t *testing.T) {
	const P, M, N = 4, 9, 2
	rng := rand.New(rand.NewPCG(3, 4))
	sim := randSim(rng, P*M*N, 0, 0.5)
	for _, method := range []string{Sinkhorn, COT} {
		c := Config{Method: method, Eps: 0.1, Thresh: 1e-3, MaxIter: 100, TopPercent: 0.8}
		want, iters := direct(sim, P, M, N, c)
		var s Solver
		plan := make([]float32, P*M*N)
		res, err := s.Plan(plan, sim, P, M, N, c)
		if err != nil {
			t.Fatal(err)
		}
		if res.Iters != iters {
			t.Errorf("%s: %d iterations, direct %d", method, res.Iters, iters)
		}
		for i := range plan {
			if d := math.Abs(float64(plan[i]) - want[i]); d > 1e-6*want[i]+1e-12 {
				t.Fatalf("%s: plan[%d] = %v, direct %v", method, i, plan[i], want[i])
			}
		}
	}
}

// direct runs the authors' iterations literally (float64, no log domain).
func direct(sim []float32, P, M, N int, c Config) ([]float64, int) {
	K := make([]float64, len(sim))
	for i, s := range sim {
		K[i] = math.Exp(-(1 - float64(s)) / c.Eps)
	}
	u, v := make([]float64, P*M), make([]float64, P*N)
	for i := range u {
		u[i] = 1
	}
	for i := range v {
		v[i] = 1
	}
	a, b := 1/float64(M), 1/float64(N)
	if c.Method == COT {
		b *= math.Min(float64(P), c.TopPercent)
	}
	it := 0
	for it < c.MaxIter {
		u0, v0 := append([]float64(nil), u...), append([]float64(nil), v...)
		for p := 0; p < P; p++ {
			for m := 0; m < M; m++ {
				var kv float64
				for n := 0; n < N; n++ {
					kv += K[(p*M+m)*N+n] * v[p*N+n]
				}
				u[p*M+m] = a / kv
				if c.Method == COT {
					u[p*M+m] = math.Min(1/(kv/a), 1)
				}
			}
			for n := 0; n < N; n++ {
				var ku float64
				for m := 0; m < M; m++ {
					ku += K[(p*M+m)*N+n] * u[p*M+m]
				}
				v[p*N+n] = b / ku
			}
		}
		it++
		var e float64
		if c.Method == COT {
			for i := range v {
				e += math.Abs(v[i] - v0[i])
			}
			e /= float64(len(v))
		} else {
			for i := range u {
				e += math.Abs(u[i] - u0[i])
			}
			e /= float64(len(u))
		}
		if e < c.Thresh {
			break
		}
	}
	out := make([]float64, len(sim))
	for p := 0; p < P; p++ {
		for m := 0; m < M; m++ {
			for n := 0; n < N; n++ {
				i := (p*M+m)*N + n
				out[i] = u[p*M+m] * K[i] * v[p*N+n]
			}
		}
	}
	return out, it
}

func TestValidateNamesKey(t *testing.T) {
	good := Config{Method: COT, Eps: 0.01, Thresh: 1e-3, MaxIter: 100, TopPercent: 0.8}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for key, c := range map[string]Config{
		`"ot"`:          {Method: "emd", Eps: 0.1, MaxIter: 1, TopPercent: 1},
		`"eps"`:         {Method: COT, Eps: 0, MaxIter: 1, TopPercent: 1},
		`"max_iter"`:    {Method: COT, Eps: 0.1, MaxIter: 0, TopPercent: 1},
		`"top_percent"`: {Method: COT, Eps: 0.1, MaxIter: 1, TopPercent: 1.5},
	} {
		err := c.Validate()
		if err == nil || !contains(err.Error(), key) {
			t.Errorf("%+v: error %v, want one naming %s", c, err, key)
		}
	}
	var s Solver
	if _, err := s.Plan(make([]float32, 4), make([]float32, 3), 1, 2, 2, good); err == nil {
		t.Error("mismatched sizes accepted")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestFixturePlans rebuilds FedOTP's similarities from the stored features
// of testdata/fedotp and compares the plan and the logits Σ plan·sim.
func TestFixturePlans(t *testing.T) {
	for _, file := range []string{"step", "step_sinkhorn", "step_eps001"} {
		t.Run(file, func(t *testing.T) {
			f, err := safetensors.Open("../testdata/fedotp/" + file + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			meta := f.Metadata()
			num := func(k string) float64 {
				v, err := strconv.ParseFloat(meta[k], 64)
				if err != nil {
					t.Fatalf("metadata %q: %v", k, err)
				}
				return v
			}
			c := Config{Method: meta["ot"], Eps: num("eps"), Thresh: num("thresh"), MaxIter: int(num("max_iter")), TopPercent: num("top_percent")}
			img, err := f.Float32("image_features") // [B, 1+M, E]
			if err != nil {
				t.Fatal(err)
			}
			txt, err := f.Float32("text_features") // [N, C, E]
			if err != nil {
				t.Fatal(err)
			}
			wantPlan, err := f.Float32("plan")
			if err != nil {
				t.Fatal(err)
			}
			wantLogits, err := f.Float32("logits")
			if err != nil {
				t.Fatal(err)
			}
			B, T, E := img.Shape[0], img.Shape[1], img.Shape[2]
			N, C, M := txt.Shape[0], txt.Shape[1], T-1
			unit := func(x []float32) []float64 {
				var s float64
				for _, v := range x {
					s += float64(v) * float64(v)
				}
				out := make([]float64, len(x))
				for i, v := range x {
					out[i] = float64(v) / math.Sqrt(s)
				}
				return out
			}
			P := B * C
			sim := make([]float32, P*M*N)
			for b := 0; b < B; b++ {
				for c := 0; c < C; c++ {
					for m := 0; m < M; m++ {
						pm := unit(img.Data[(b*T+1+m)*E : (b*T+2+m)*E])
						for n := 0; n < N; n++ {
							tn := unit(txt.Data[(n*C+c)*E : (n*C+c+1)*E])
							var d float64
							for k := range pm {
								d += pm[k] * tn[k]
							}
							sim[((b*C+c)*M+m)*N+n] = float32(d)
						}
					}
				}
			}
			var s Solver
			plan := make([]float32, P*M*N)
			res, err := s.Plan(plan, sim, P, M, N, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d iterations, last change %.3g", res.Iters, res.Err)
			d64, it64 := direct(sim, P, M, N, c)
			d32 := make([]float32, len(d64))
			for i, v := range d64 {
				d32[i] = float32(v)
			}
			if r := rel(plan, d32); r > 1e-6 || it64 != res.Iters {
				t.Errorf("plan: rel %.3g to the float64 iterations (%d iterations, theirs %d)", r, res.Iters, it64)
			}
			// The stored plan of the float32 reference carries its own
			// rounding (1.7e-5 relative after 47 COT iterations at ε 0.1,
			// where the float64 iterations equal ours to float32 precision):
			// the plan is an intermediate, held to the gradients' 1e-4.
			if r := rel(plan, wantPlan.Data); r > 1e-4 {
				t.Errorf("plan: rel %.3g > 1e-4", r)
			}
			logits := make([]float32, B*C)
			for p := 0; p < P; p++ {
				var sum float64
				for i := p * M * N; i < (p+1)*M*N; i++ {
					sum += float64(plan[i]) * float64(sim[i])
				}
				logits[p] = float32(math.Exp(4) * sum)
			}
			if r := rel(logits, wantLogits.Data); r > 1e-5 {
				t.Errorf("logits: rel %.3g > 1e-5", r)
			}
		})
	}
}

// rel is max|got − want| / max|want|.
func rel(got, want []float32) float64 {
	var d, m float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = math.Max(m, math.Abs(float64(want[i])))
	}
	return d / m
}
