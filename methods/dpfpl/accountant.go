package dpfpl

import (
	"fmt"
	"math"
)

// Orders are the Rényi orders α the accountant evaluates: Opacus's
// default list (1.1, 1.2, …, 10.9, 11, 12, …, 63) and larger whole orders
// up to 4096, where the optimum lies for the large noise multipliers of
// DP-FPL's calibration (σ ≈ 85 at its defaults: with orders up to 63 the
// bound would stall near ε ≈ 0.1). Orders that are not whole numbers are
// used only for the unsampled Gaussian (q = 1), whose RDP is known in
// closed form at every order.
func Orders() []float64 {
	var out []float64
	for x := 1; x <= 100; x++ {
		out = append(out, 1+float64(x)/10)
	}
	for a := 12; a < 64; a++ {
		out = append(out, float64(a))
	}
	return append(out, 64, 72, 80, 96, 112, 128, 160, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
}

// GaussianRDP is the Rényi differential privacy at order α of one
// application of the sampled Gaussian mechanism: sampling rate q (each
// record included independently with probability q; q = 1: no
// subsampling), noise multiplier z (noise standard deviation over the
// sensitivity). It is +Inf where it is not computed: a fractional order
// with q < 1, or z = 0.
//
// q = 1 is the Gaussian mechanism, α/(2z²). For 0 < q < 1 and a whole α
// it is Mironov, Talwar and Zhang (2019, §3.3):
//
//	(1/(α−1)) · log Σ_{k=0..α} C(α,k) (1−q)^{α−k} q^k exp((k²−k)/(2z²))
//
// summed in log space.
func GaussianRDP(q, z, alpha float64) float64 {
	switch {
	case q == 0:
		return 0
	case z <= 0 || alpha <= 1:
		return math.Inf(1)
	case q >= 1:
		return alpha / (2 * z * z)
	case alpha != math.Trunc(alpha):
		return math.Inf(1)
	}
	n := int(alpha)
	logSum := math.Inf(-1)
	lq, l1q := math.Log(q), math.Log1p(-q)
	for k := 0; k <= n; k++ {
		kf := float64(k)
		t := logBinom(n, k) + (alpha-kf)*l1q + kf*lq + (kf*kf-kf)/(2*z*z)
		logSum = logAdd(logSum, t)
	}
	return logSum / (alpha - 1)
}

func logBinom(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

func logAdd(a, b float64) float64 {
	if math.IsInf(a, -1) {
		return b
	}
	if math.IsInf(b, -1) {
		return a
	}
	m := math.Max(a, b)
	return m + math.Log(math.Exp(a-m)+math.Exp(b-m))
}

// EpsilonFromRDP converts RDP values at orders (composed: summed over the
// mechanism's applications) to (ε, δ)-DP, with the conversion of Balle et
// al. (2020, Thm. 21) that Opacus uses:
//
//	ε = min_α  rdp(α) + log((α−1)/α) − (log δ + log α)/(α−1)
//
// It returns ε and the order that attains it.
func EpsilonFromRDP(rdp, orders []float64, delta float64) (float64, float64, error) {
	if len(rdp) != len(orders) || len(orders) == 0 {
		return 0, 0, fmt.Errorf("dpfpl accountant: %d RDP values for %d orders", len(rdp), len(orders))
	}
	if !(delta > 0 && delta < 1) {
		return 0, 0, fmt.Errorf("dpfpl accountant: delta %g outside (0, 1)", delta)
	}
	best, bestOrder := math.Inf(1), math.NaN()
	for i, a := range orders {
		if a <= 1 || math.IsInf(rdp[i], 1) || math.IsNaN(rdp[i]) {
			continue
		}
		eps := rdp[i] + math.Log((a-1)/a) - (math.Log(delta)+math.Log(a))/(a-1)
		if eps < best {
			best, bestOrder = eps, a
		}
	}
	return math.Max(best, 0), bestOrder, nil
}

// Accountant composes applications of sampled Gaussian mechanisms (RDP
// adds up over compositions) and reports the (ε, δ) they spend. The zero
// value has spent nothing.
type Accountant struct {
	rdp []float64 // per order of Orders()
}

// Spend records steps applications of the sampled Gaussian mechanism with
// sampling rate q and noise multiplier z.
func (a *Accountant) Spend(q, z float64, steps int) {
	orders := Orders()
	if a.rdp == nil {
		a.rdp = make([]float64, len(orders))
	}
	for i, o := range orders {
		a.rdp[i] += float64(steps) * GaussianRDP(q, z, o)
	}
}

// Epsilon is the ε of everything spent so far at δ (0 before any Spend).
func (a *Accountant) Epsilon(delta float64) (float64, error) {
	if a.rdp == nil {
		return 0, nil
	}
	eps, _, err := EpsilonFromRDP(a.rdp, Orders(), delta)
	return eps, err
}

// GaussianEpsilon is the ε at δ of steps applications of the (unsampled,
// q = 1) Gaussian mechanism with noise multiplier z; +Inf for z = 0.
func GaussianEpsilon(z float64, steps int, delta float64) (float64, error) {
	if steps <= 0 {
		return 0, nil
	}
	if !(z > 0) {
		return math.Inf(1), nil
	}
	var a Accountant
	a.Spend(1, z, steps)
	return a.Epsilon(delta)
}

// PaperSigma is DP-FPL's calibration of the noise multiplier for a target
// ε (the code's --noise) over steps Gaussian applications at δ, sampling
// rate q (the code's q = 1): σ = q·√(steps·log(1/δ))/ε, the form of Abadi
// et al.'s (2016) moments-accountant bound with its constant set to 1.
func PaperSigma(eps, delta, q float64, steps int) float64 {
	return q * math.Sqrt(float64(steps)*math.Log(1/delta)) / eps
}

// UploadFactor bounds how far one round's local SGD moves the uploaded
// parameters when every step's (clipped) gradient changes by at most Δ, in
// units of η₀·Δ (η₀: the learning rate the server's noise is scaled by).
// lrs are the round's step learning rates in order and beta SGD's momentum
// in PyTorch's form (b ← β·b + g, p ← p − η·b): a change at step t of S
// moves the upload by Σ_{j=0..S−t} η_{t+j}·β^j. With carried (the momentum
// buffer kept across rounds) the earlier steps' changes, summed in the
// buffer the round starts from (at most Δ/(1−β)), still move this round's
// upload, by at most Σ_t η_t·β^t/(1−β), which is added. Weight decay's
// feedback of the parameter difference is not counted (a contraction for
// η·wd < 1).
func UploadFactor(lrs []float64, eta0, beta float64, carried bool) float64 {
	var f, left float64
	decay := 1.0
	for t := range lrs {
		w := 1.0
		for j := t; j < len(lrs); j++ {
			f += lrs[j] * w
			w *= beta
		}
		decay *= beta
		left += lrs[t] * decay
	}
	if carried && beta > 0 {
		f += left / (1 - beta)
	}
	return f / eta0
}

// Metric names of the privacy a site has spent (training metrics; the
// server reports the largest over the round's sites).
const (
	// MetricLocal: the local mechanism (gU and gV, two Gaussian releases a
	// local step, every step) at the sensitivity the authors' code states,
	// C/B (one example's share of a batch mean of per-example clipped
	// gradients; noise multiplier σ).
	MetricLocal = "dp_epsilon_local"
	// MetricGlobal: the server's Gaussian, one a round, on the mean of the
	// uploads, each upload S local steps of the global context: its
	// sensitivity at C/B a step is UploadFactor·η₀·C/B (multiplier
	// σ/UploadFactor).
	MetricGlobal = "dp_epsilon_global"
	// MetricLocalBatchClip and MetricGlobalBatchClip are the same at the
	// sensitivity of the clipping as the code runs it: the batch-mean
	// gradient clipped to norm C moves by up to 2C when one example
	// changes (multipliers σ/(2B) and σ/(2B·UploadFactor)).
	MetricLocalBatchClip  = "dp_epsilon_local_batch_clip"
	MetricGlobalBatchClip = "dp_epsilon_global_batch_clip"
	// MetricTotal and MetricTotalBatchClip compose both ledgers: the
	// global context a site uploads depends on its local context, which
	// carries its data through the local releases, so what is published
	// (the global context, and the site's personal model) is bounded by all
	// releases together.
	MetricTotal          = "dp_epsilon_total"
	MetricTotalBatchClip = "dp_epsilon_total_batch_clip"
)

// Which figures bound the mechanism as it runs: C/B is one example's share
// of a mean of per-example clipped gradients at the same parameters. The
// code clips the batch mean (one example moves it by up to 2C), and after
// a round's first local step the neighbouring runs' global contexts differ
// (the local steps are not noised), so every example's gradient may
// differ: only the batch-clip (2C) figures bound that, as any two clipped
// means differ by at most 2C. The C/B figures are the code's own
// calibration, counted correctly; they hold for per-example clipping with
// one local step a round (the authors' per-batch communication), which is
// not what runs here by default. With Ledger.PerExample (DP-SGD on the site,
// Settings.PerExampleDP) C/B holds at every step and MetricGlobal counts the
// site's noise on the global gradient, one release a step; no batch-clip
// figures are reported.

// Ledger is one site's privacy spending as DP-FPL runs: its local steps so
// far (each releases gU and gV through Gaussians of standard deviation
// s = σ·C/B) and, per round it took part in, its upload's UploadFactor
// (the server adds one Gaussian of standard deviation η₀·s/K to the mean
// of K uploads).
type Ledger struct {
	LocalSteps    int
	UploadFactors []float64
	// PerExample: the site runs DP-SGD (Settings.PerExampleDP): three
	// releases a step (the global gradient, gU, gV), each per-example
	// clipped and noised on the site, sensitivity C/B; the server's noise
	// is then post-processing and not counted.
	PerExample bool
}

// Epsilons returns the ε at delta of the releases so far at both
// sensitivities (the Metric* names) for noise multiplier sigma and batch
// size batch (B). Nothing before any release; an error for sigma ≤ 0.
func (l Ledger) Epsilons(sigma float64, batch int, delta float64) (map[string]float64, error) {
	if !(sigma > 0) || batch < 1 {
		return nil, fmt.Errorf("dpfpl accountant: noise multiplier %g, batch %d", sigma, batch)
	}
	out := map[string]float64{}
	if l.PerExample {
		for name, n := range map[string]int{MetricLocal: 2 * l.LocalSteps, MetricGlobal: l.LocalSteps, MetricTotal: 3 * l.LocalSteps} {
			var a Accountant
			a.Spend(1, sigma, n)
			eps, err := a.Epsilon(delta)
			if err != nil {
				return nil, err
			}
			out[name] = eps
		}
		return out, nil
	}
	clip2 := 2 * float64(batch) // 2C over the sensitivity C/B the noise is scaled for
	for name, z := range map[string]float64{MetricLocal: sigma, MetricLocalBatchClip: sigma / clip2} {
		var a Accountant
		a.Spend(1, z, 2*l.LocalSteps)
		eps, err := a.Epsilon(delta)
		if err != nil {
			return nil, err
		}
		out[name] = eps
	}
	for _, m := range []struct {
		global, total string
		div           float64
	}{{MetricGlobal, MetricTotal, 1}, {MetricGlobalBatchClip, MetricTotalBatchClip, clip2}} {
		var a Accountant
		for _, f := range l.UploadFactors {
			if f > 0 {
				a.Spend(1, sigma/(m.div*f), 1)
			}
		}
		eps, err := a.Epsilon(delta)
		if err != nil {
			return nil, err
		}
		out[m.global] = eps
		a.Spend(1, sigma/m.div, 2*l.LocalSteps)
		if out[m.total], err = a.Epsilon(delta); err != nil {
			return nil, err
		}
	}
	return out, nil
}
