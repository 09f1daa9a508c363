package dpfpl

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
)

// TestAbadiMomentsAccountant reproduces the published figure of Abadi et
// al. (2016, §3.1): q = 0.01, σ = 4, 10 000 steps, δ = 1e-5 give ε ≈ 1.26
// with the moments accountant (whole orders up to 32, the conversion
// ε = min_α rdp(α) + log(1/δ)/(α−1)).
func TestAbadiMomentsAccountant(t *testing.T) {
	var a Accountant
	a.Spend(0.01, 4, 10000)
	best := math.Inf(1)
	for i, o := range Orders() {
		if o != math.Trunc(o) || o > 32 {
			continue
		}
		best = math.Min(best, a.rdp[i]+math.Log(1/1e-5)/(o-1))
	}
	if math.Abs(best-1.26) > 0.005 {
		t.Errorf("moments-accountant ε = %.4f, published 1.26", best)
	}
	// the conversion of Balle et al. (2020) is tighter
	eps, err := a.Epsilon(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if !(eps < best && eps > 0.5) {
		t.Errorf("ε = %g with the improved conversion, want in (0.5, %g)", eps, best)
	}
}

// TestSampledGaussianQuadrature checks the closed-form sum against a direct
// numerical integration of E_{x∼N(0,z²)}[((1−q) + q·exp((2x−1)/(2z²)))^α],
// the α-moment of the likelihood ratio of (1−q)N(0,z²)+qN(1,z²) to N(0,z²).
func TestSampledGaussianQuadrature(t *testing.T) {
	for _, c := range []struct{ q, z, alpha float64 }{
		{0.01, 1, 2}, {0.01, 1, 8}, {0.1, 2, 5}, {0.05, 0.8, 12}, {0.3, 3, 20},
	} {
		got := GaussianRDP(c.q, c.z, c.alpha)
		// Simpson's rule on [−30z, 30z + 30] with 200 000 intervals
		lo, hi := -30*c.z, 30*c.z+30
		n := 200000
		h := (hi - lo) / float64(n)
		f := func(x float64) float64 {
			pdf := math.Exp(-x*x/(2*c.z*c.z)) / (c.z * math.Sqrt(2*math.Pi))
			r := (1 - c.q) + c.q*math.Exp((2*x-1)/(2*c.z*c.z))
			return pdf * math.Pow(r, c.alpha)
		}
		s := f(lo) + f(hi)
		for i := 1; i < n; i++ {
			w := 2.0
			if i%2 == 1 {
				w = 4
			}
			s += w * f(lo+float64(i)*h)
		}
		want := math.Log(s*h/3) / (c.alpha - 1)
		if math.Abs(got-want) > 1e-7*math.Max(1, math.Abs(want)) {
			t.Errorf("q %g z %g α %g: RDP %.10g, quadrature %.10g", c.q, c.z, c.alpha, got, want)
		}
	}
	if GaussianRDP(0.5, 1, 2.5) != math.Inf(1) {
		t.Error("a fractional order with q < 1 is not +Inf")
	}
	if got, want := GaussianRDP(1, 2, 3.5), 3.5/8; got != want {
		t.Errorf("unsampled RDP %g, want α/(2z²) = %g", got, want)
	}
}

// analyticGaussianEpsilon is the exact ε at δ of the Gaussian mechanism
// with sensitivity 1 and noise s (Balle and Wang, 2018):
// δ(ε) = Φ(1/(2s) − εs) − e^ε Φ(−1/(2s) − εs), solved by bisection.
func analyticGaussianEpsilon(s, delta float64) float64 {
	phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	d := func(eps float64) float64 {
		return phi(1/(2*s)-eps*s) - math.Exp(eps)*phi(-1/(2*s)-eps*s)
	}
	lo, hi := 0.0, 1.0
	for d(hi) > delta {
		hi *= 2
	}
	for range 200 {
		mid := (lo + hi) / 2
		if d(mid) > delta {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// TestGaussianEpsilonBrackets: T Gaussians of multiplier z are one Gaussian
// of multiplier z/√T, whose exact ε is known; the RDP accountant's ε must
// lie above it (it is an upper bound) and close to it.
func TestGaussianEpsilonBrackets(t *testing.T) {
	for _, c := range []struct {
		z     float64
		steps int
	}{{1, 1}, {4, 10}, {169.65, 100}, {20, 1000}, {2, 50}} {
		got, err := GaussianEpsilon(c.z, c.steps, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		exact := analyticGaussianEpsilon(c.z/math.Sqrt(float64(c.steps)), 1e-5)
		if !(got >= exact && got <= 1.3*exact+0.05) {
			t.Errorf("z %g, %d steps: RDP ε %g, exact %g", c.z, c.steps, got, exact)
		}
	}
	// DP-FPL's noise (σ = 84.8, the default calibration): the large orders
	// keep the bound within 30% of the exact ε without an additive slack
	for _, steps := range []int{1, 2, 100} {
		got, _ := GaussianEpsilon(84.8, steps, 1e-5)
		exact := analyticGaussianEpsilon(84.8/math.Sqrt(float64(steps)), 1e-5)
		if !(got >= exact && got <= 1.3*exact) {
			t.Errorf("σ 84.8, %d steps: RDP ε %g, exact %g", steps, got, exact)
		}
	}
	if e, _ := GaussianEpsilon(0, 3, 1e-5); !math.IsInf(e, 1) {
		t.Errorf("no noise: ε %g, want +Inf", e)
	}
	if e, _ := GaussianEpsilon(1, 0, 1e-5); e != 0 {
		t.Errorf("no steps: ε %g, want 0", e)
	}
	if _, err := (&Accountant{rdp: make([]float64, len(Orders()))}).Epsilon(0); err == nil {
		t.Error("δ = 0 accepted")
	}
}

// TestPaperSigma: the authors' calibration σ = q√(T log(1/δ))/ε, at their
// defaults (100 rounds, δ = 1e-5) for ε = 0.2.
func TestPaperSigma(t *testing.T) {
	got := PaperSigma(0.2, 1e-5, 1, 100)
	if want := math.Sqrt(100*math.Log(1e5)) / 0.2; math.Abs(got-want) > 1e-12*want || math.Abs(got-169.65) > 0.01 {
		t.Errorf("σ = %g, want %g", got, want)
	}
}

// TestAccountantMatchesOracle compares the accountant with an independent
// implementation of the same formulas (reference/dpfpl/rdp_oracle.py:
// Mironov, Talwar and Zhang 2019 §3.3 sampled-Gaussian RDP with exact
// binomials and 60-digit decimals, Balle et al. 2020 Thm. 21 conversion;
// Opacus, the usual reference, could not be fetched on the machine the
// table was made on) over the rows of testdata/dpfpl/rdp_oracle.json:
// (q, σ, steps, δ) → ε, relative tolerance 1e-6.
func TestAccountantMatchesOracle(t *testing.T) {
	doc := readOracle(t)
	if len(doc.Rows) < 10 {
		t.Fatalf("rdp_oracle.json: %d rows, want at least 10", len(doc.Rows))
	}
	for _, r := range doc.Rows {
		var a Accountant
		a.Spend(r.Q, r.Sigma, r.Steps)
		got, err := a.Epsilon(r.Delta)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-r.Epsilon) > 1e-6*r.Epsilon {
			t.Errorf("q %g σ %g steps %d δ %g: ε %.10g, oracle %.10g", r.Q, r.Sigma, r.Steps, r.Delta, got, r.Epsilon)
		}
	}
}

// oracleTable is testdata/dpfpl/rdp_oracle.json.
type oracleTable struct {
	Rows []struct {
		Q, Sigma, Delta, Epsilon float64
		Steps                    int
	}
}

func readOracle(t *testing.T) oracleTable {
	t.Helper()
	b, err := os.ReadFile(paritytest.Testdata + "dpfpl/rdp_oracle.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc oracleTable
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("rdp_oracle.json: %v", err)
	}
	return doc
}

// lookup is the oracle's ε of the row (q, σ up to 1e-9 relative, steps, δ).
func (o oracleTable) lookup(q, sigma float64, steps int, delta float64) (float64, bool) {
	for _, r := range o.Rows {
		if r.Q == q && r.Steps == steps && r.Delta == delta && math.Abs(r.Sigma-sigma) <= 1e-9*sigma {
			return r.Epsilon, true
		}
	}
	return 0, false
}

// TestUploadFactor: hand-computed bounds on how far a change Δ of every
// step's gradient moves a round's upload (units η₀·Δ). Plain SGD: one η a
// step. Momentum 0.9 reset each round, 3 steps: (1+0.9+0.81) + (1+0.9) + 1
// = 5.61. Kept across rounds: plus the buffer the round starts from
// (≤ Δ/0.1) through β + β² + β³: (0.9+0.81+0.729)/0.1 = 24.39. Varying
// rates, β 0.5, η₀ 0.1: (0.1 + 0.05·0.5 + 0.05)/0.1 = 1.75.
func TestUploadFactor(t *testing.T) {
	for _, c := range []struct {
		lrs        []float64
		eta0, beta float64
		carried    bool
		want       float64
	}{
		{[]float64{0.05, 0.05, 0.05}, 0.05, 0, false, 3},
		{[]float64{0.05, 0.05, 0.05}, 0.05, 0, true, 3},
		{[]float64{1, 1, 1}, 1, 0.9, false, 5.61},
		{[]float64{1, 1, 1}, 1, 0.9, true, 5.61 + 24.39},
		{[]float64{0.1, 0.05}, 0.1, 0.5, false, 1.75},
		{nil, 1, 0.9, true, 0},
	} {
		if got := UploadFactor(c.lrs, c.eta0, c.beta, c.carried); math.Abs(got-c.want) > 1e-12*math.Max(1, c.want) {
			t.Errorf("UploadFactor(%v, η₀ %g, β %g, carried %v) = %.15g, want %g", c.lrs, c.eta0, c.beta, c.carried, got, c.want)
		}
	}
}

// TestREADMEJobEpsilon: the README's world-compare job (ε 0.4 calibrated
// to T = 5 rounds at δ 1e-5, batch 32, 3 local epochs of one batch a
// round, SGD momentum 0.9 reset each round) spends, by the ledger, what
// the independent oracle (testdata/dpfpl/rdp_oracle.json) computes for
// its releases: 2 × 15 local Gaussians at σ (1.185, where the code counted
// 15: 0.812), 5 server Gaussians at σ/5.61 (2.958, where the code counted
// σ: 0.448), and at the batch clipping's 2C (σ/64): 258.0 and 1097.1.
func TestREADMEJobEpsilon(t *testing.T) {
	s := &Settings{Epsilon: 0.4, Delta: 1e-5, CalibrationRounds: 5}
	sigma := s.Sigma()
	f := UploadFactor([]float64{0.05, 0.05, 0.05}, 0.05, 0.9, false)
	l := Ledger{LocalSteps: 15, UploadFactors: []float64{f, f, f, f, f}}
	got, err := l.Epsilons(sigma, 32, s.Delta)
	if err != nil {
		t.Fatal(err)
	}
	oracle := readOracle(t)
	for name, row := range map[string]struct {
		z     float64
		steps int
	}{
		MetricLocal:           {sigma, 30},
		MetricGlobal:          {sigma / 5.61, 5},
		MetricLocalBatchClip:  {sigma / 64, 30},
		MetricGlobalBatchClip: {sigma / (64 * 5.61), 5},
	} {
		want, ok := oracle.lookup(1, row.z, row.steps, s.Delta)
		if !ok {
			t.Fatalf("rdp_oracle.json has no row q 1, σ %g, %d steps", row.z, row.steps)
		}
		if math.Abs(got[name]-want) > 1e-6*want {
			t.Errorf("%s = %.10g, oracle %.10g", name, got[name], want)
		}
	}
	// the totals compose both: 30 local and 5 server Gaussians
	for name, z := range map[string][2]float64{MetricTotal: {sigma, sigma / 5.61}, MetricTotalBatchClip: {sigma / 64, sigma / (64 * 5.61)}} {
		var a Accountant
		a.Spend(1, z[0], 30)
		a.Spend(1, z[1], 5)
		want, _ := a.Epsilon(s.Delta)
		if math.Abs(got[name]-want) > 1e-6*want || !(want > got[MetricLocal]) {
			t.Errorf("%s = %.10g, want %.10g", name, got[name], want)
		}
	}
	t.Logf("README job: %v", got)
	if _, err := (Ledger{}).Epsilons(0, 32, 1e-5); err == nil {
		t.Error("σ 0 accepted")
	}
}
