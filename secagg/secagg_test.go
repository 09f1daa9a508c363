package secagg

import (
	"bytes"
	"crypto/sha256"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func session(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// round runs the four rounds in memory for cfg's sites; drop lists sites
// that vanish after sharing keys (before their masked input).
type round struct {
	cfg     *Config
	srv     *Server
	clients map[int]*Client
}

func newRound(t *testing.T, cfg *Config) *round {
	t.Helper()
	r := &round{cfg: cfg, srv: NewServer(cfg), clients: map[int]*Client{}}
	for _, id := range cfg.Sites {
		c, err := NewClient(cfg, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.clients[id] = c
	}
	return r
}

func (r *round) run(xs map[int][]float32, ws map[int]uint64, drop map[int]bool) (Result, error) {
	for _, id := range r.cfg.Sites {
		a, err := r.clients[id].Advertise()
		if err != nil {
			return Result{}, err
		}
		// through the wire encoding, as a transport would
		a, err = UnmarshalAdvertise(MarshalAdvertise(a))
		if err != nil {
			return Result{}, err
		}
		if err := r.srv.ReceiveAdvertise(a); err != nil {
			return Result{}, err
		}
	}
	adv, err := r.srv.KeysDone()
	if err != nil {
		return Result{}, err
	}
	if adv, err = UnmarshalAdvertiseList(MarshalAdvertiseList(adv)); err != nil {
		return Result{}, err
	}
	for _, id := range r.cfg.Sites {
		sh, err := r.clients[id].ShareKeys(adv)
		if err != nil {
			return Result{}, err
		}
		if sh, err = UnmarshalShares(MarshalShares(sh)); err != nil {
			return Result{}, err
		}
		if err := r.srv.ReceiveShares(id, sh); err != nil {
			return Result{}, err
		}
	}
	if err := r.srv.SharesDone(); err != nil {
		return Result{}, err
	}
	for _, id := range r.cfg.Sites {
		if drop[id] {
			continue
		}
		in, err := r.srv.Inbox(id)
		if err != nil {
			return Result{}, err
		}
		m, _, err := r.clients[id].MaskInput(in, xs[id], ws[id])
		if err != nil {
			return Result{}, err
		}
		if m, err = UnmarshalMasked(MarshalMasked(m)); err != nil {
			return Result{}, err
		}
		if err := r.srv.ReceiveMasked(m); err != nil {
			return Result{}, err
		}
	}
	alive, err := r.srv.MaskedDone()
	if err != nil {
		return Result{}, err
	}
	if alive, err = UnmarshalSurvivors(MarshalSurvivors(alive)); err != nil {
		return Result{}, err
	}
	sigs, err := consistency(r.srv, r.clients, alive)
	if err != nil {
		return Result{}, err
	}
	for _, id := range alive {
		rv, err := r.clients[id].Unmask(sigs)
		if err != nil {
			return Result{}, err
		}
		if rv, err = UnmarshalReveal(MarshalReveal(rv)); err != nil {
			return Result{}, err
		}
		if err := r.srv.ReceiveReveal(rv); err != nil {
			return Result{}, err
		}
	}
	return r.srv.Finish()
}

// consistency runs the consistency round for the survivors alive (through
// the wire encoding) and returns the relayed signatures.
func consistency(srv *Server, clients map[int]*Client, alive []int) ([]Consistency, error) {
	for _, id := range alive {
		c, err := clients[id].SignSurvivors(alive)
		if err != nil {
			return nil, err
		}
		if c, err = UnmarshalConsistency(MarshalConsistency(c)); err != nil {
			return nil, err
		}
		if err := srv.ReceiveConsistency(c); err != nil {
			return nil, err
		}
	}
	sigs, err := srv.ConsistencyDone()
	if err != nil {
		return nil, err
	}
	return UnmarshalConsistencyList(MarshalConsistencyList(sigs))
}

// inputs draws n inputs of length l in [-scale, scale] and weights in
// [1, 500].
func inputs(rng *rand.Rand, sites []int, l int, scale float64) (map[int][]float32, map[int]uint64) {
	xs, ws := map[int][]float32{}, map[int]uint64{}
	for _, id := range sites {
		x := make([]float32, l)
		for i := range x {
			x[i] = float32((2*rng.Float64() - 1) * scale)
		}
		xs[id], ws[id] = x, 1+rng.Uint64N(500)
	}
	return xs, ws
}

// fedavg is the exact weighted mean over the given sites (float64).
func fedavg(xs map[int][]float32, ws map[int]uint64, sites []int) []float64 {
	var tot float64
	out := make([]float64, len(xs[sites[0]]))
	for _, id := range sites {
		tot += float64(ws[id])
		for i, v := range xs[id] {
			out[i] += float64(ws[id]) * float64(v)
		}
	}
	for i := range out {
		out[i] /= tot
	}
	return out
}

func maxDiff(a, b []float64) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

func checkResult(t *testing.T, cfg *Config, res Result, xs map[int][]float32, ws map[int]uint64, survivors []int) {
	t.Helper()
	if !slices.Equal(res.Survivors, survivors) {
		t.Fatalf("survivors %v, want %v", res.Survivors, survivors)
	}
	var w uint64
	for _, id := range survivors {
		w += ws[id]
	}
	if res.Weight != w {
		t.Fatalf("total weight %d, want %d", res.Weight, w)
	}
	want := fedavg(xs, ws, survivors)
	bound := cfg.Quant.Bound() * (1 + 1e-9)
	if d := maxDiff(res.Mean, want); d > bound {
		t.Fatalf("unmasked mean differs from FedAvg by %g > bound %g", d, bound)
	}
	// The protocol is exact integer arithmetic: it equals the unmasked
	// quantised aggregation bit for bit.
	var in [][]float32
	var win []uint64
	for _, id := range survivors {
		in, win = append(in, xs[id]), append(win, ws[id])
	}
	plain, err := cfg.Quant.Aggregate(in, win)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plain, res.Mean) {
		t.Fatalf("unmasked mean is not bit-identical to Quantizer.Aggregate (max diff %g)", maxDiff(plain, res.Mean))
	}
}

func sites(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 3*i + 1 // not 0..n-1: IDs are arbitrary
	}
	return s
}

func TestRoundEqualsFedAvg(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 3, 7} {
		cfg, err := NewConfig(session("fedavg"), sites(n), 300, Options{})
		if err != nil {
			t.Fatal(err)
		}
		xs, ws := inputs(rng, cfg.Sites, cfg.Length, 2)
		res, err := newRound(t, cfg).run(xs, ws, nil)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		checkResult(t, cfg, res, xs, ws, cfg.Sites)
		if len(res.Dropped) != 0 {
			t.Fatalf("dropped %v, want none", res.Dropped)
		}
	}
}

func TestRoundSurvivesDrops(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name  string
		n     int
		opt   Options
		drops int
	}{
		{"3 sites complete, 1 drops", 3, Options{}, 1},
		{"10 sites complete, 3 drop", 10, Options{}, 3},
		{"10 sites complete, 4 drop", 10, Options{}, 4},
		{"40 sites Harary k=16, 12 drop", 40, Options{Degree: 16}, 12},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := NewConfig(session(tc.name), sites(tc.n), 64, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if tc.opt.Degree > 0 {
				for _, id := range cfg.Sites {
					if len(cfg.Neighbours(id)) != tc.opt.Degree {
						t.Fatalf("site %d has %d neighbours, want %d", id, len(cfg.Neighbours(id)), tc.opt.Degree)
					}
					for _, j := range cfg.Neighbours(id) {
						if !cfg.adjacent(j, id) {
							t.Fatalf("graph not symmetric: %d→%d", id, j)
						}
					}
				}
			}
			xs, ws := inputs(rng, cfg.Sites, cfg.Length, 1)
			perm := rng.Perm(tc.n)
			drop := map[int]bool{}
			for _, p := range perm[:tc.drops] {
				drop[cfg.Sites[p]] = true
			}
			res, err := newRound(t, cfg).run(xs, ws, drop)
			if err != nil {
				t.Fatal(err)
			}
			alive := slices.DeleteFunc(slices.Clone(cfg.Sites), func(id int) bool { return drop[id] })
			checkResult(t, cfg, res, xs, ws, alive)
			if len(res.Dropped) != tc.drops {
				t.Fatalf("dropped %v, want %d sites", res.Dropped, tc.drops)
			}
		})
	}
}

func TestRefusesBelowThreshold(t *testing.T) {
	cfg, err := NewConfig(session("few"), sites(5), 8, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Threshold != 3 {
		t.Fatalf("threshold %d for 5 sites, want 3", cfg.Threshold)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	xs, ws := inputs(rng, cfg.Sites, cfg.Length, 1)
	drop := map[int]bool{cfg.Sites[0]: true, cfg.Sites[2]: true, cfg.Sites[4]: true}
	_, err = newRound(t, cfg).run(xs, ws, drop)
	if err == nil || !strings.Contains(err.Error(), "fewer than the threshold") {
		t.Fatalf("3 of 5 dropped: %v, want a refusal below the threshold", err)
	}
	// A site refuses a survivor list below the threshold even if the server
	// asks.
	r := newRound(t, cfg)
	_, err = r.run(xs, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2 := newRound(t, cfg)
	for _, id := range cfg.Sites {
		a, _ := r2.clients[id].Advertise()
		if err := r2.srv.ReceiveAdvertise(a); err != nil {
			t.Fatal(err)
		}
	}
	adv, _ := r2.srv.KeysDone()
	for _, id := range cfg.Sites {
		sh, err := r2.clients[id].ShareKeys(adv)
		if err != nil {
			t.Fatal(err)
		}
		if err := r2.srv.ReceiveShares(id, sh); err != nil {
			t.Fatal(err)
		}
	}
	if err := r2.srv.SharesDone(); err != nil {
		t.Fatal(err)
	}
	c := r2.clients[cfg.Sites[1]]
	in, _ := r2.srv.Inbox(cfg.Sites[1])
	if _, _, err := c.MaskInput(in, xs[cfg.Sites[1]], 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SignSurvivors([]int{cfg.Sites[1], cfg.Sites[3]}); err == nil || !strings.Contains(err.Error(), "refusing to unmask") {
		t.Fatalf("unmask with 2 survivors: %v, want a refusal", err)
	}
	if _, err := c.SignSurvivors(cfg.Sites); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("a second SignSurvivors: %v, want refused (a site signs once)", err)
	}
}

// chiSquareBytes is the χ² statistic of b's byte histogram against uniform.
func chiSquareBytes(b []byte) float64 {
	var h [256]float64
	for _, c := range b {
		h[c]++
	}
	e := float64(len(b)) / 256
	var x float64
	for _, v := range h {
		x += (v - e) * (v - e) / e
	}
	return x
}

func TestMaskedInputLooksUniform(t *testing.T) {
	const l = 4096
	cfg, err := NewConfig(session("uniform"), sites(3), l, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	xs, ws := inputs(rng, cfg.Sites, l, 0.01)
	// one site sends a constant update: as structured as an input can be
	xs[cfg.Sites[0]] = make([]float32, l)
	srv := newRound(t, cfg)
	if _, err := srv.run(xs, ws, nil); err != nil {
		t.Fatal(err)
	}
	// χ² with 255 degrees of freedom: mean 255, sd √510 ≈ 22.6; 255 + 6 sd
	// ≈ 390 is exceeded by uniform bytes with probability < 1e-7.
	const limit = 390
	for _, id := range cfg.Sites {
		y := srv.srv.Masked(id)
		var b []byte
		var mean, m2 float64
		for _, v := range y[:l] {
			b = append(b, MarshalMasked(MaskedInput{Y: []uint64{v}})[2+8+4:]...)
			u := float64(v) / math.Ldexp(1, 64)
			mean += u
			m2 += u * u
		}
		mean /= l
		variance := m2/l - mean*mean
		if x := chiSquareBytes(b); x > limit {
			t.Errorf("site %d: stored masked input's byte χ² = %.1f > %d: not uniform", id, x, limit)
		}
		// uniform on [0,1): mean 1/2 (sd 0.0045 at l=4096), variance 1/12
		if math.Abs(mean-0.5) > 0.03 || math.Abs(variance-1.0/12) > 0.01 {
			t.Errorf("site %d: masked words/2^64 have mean %.4f, variance %.4f; uniform gives 0.5, 0.0833", id, mean, variance)
		}
	}
	// The statistic does detect structure: the quantised input unmasked.
	q := make([]uint64, l+1)
	if _, err := cfg.Quant.Encode(q, xs[cfg.Sites[1]], ws[cfg.Sites[1]]); err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, v := range q[:l] {
		b = append(b, MarshalMasked(MaskedInput{Y: []uint64{v}})[2+8+4:]...)
	}
	if x := chiSquareBytes(b); x <= limit {
		t.Fatalf("unmasked quantised input has χ² %.1f ≤ %d: the test cannot tell structure from noise", x, limit)
	}
}

func TestQuantisationBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, bits := range []uint{8, 16, 24} {
		q := Quantizer{Clip: DefaultClip, ScaleBits: bits}
		var worst float64
		for trial := range 50 {
			n := 2 + trial%9
			var xs [][]float32
			var ws []uint64
			m := map[int][]float32{}
			wm := map[int]uint64{}
			ids := make([]int, n)
			for i := range n {
				x := make([]float32, 32)
				for j := range x {
					// small values: float32 resolution finer than 2^-s
					x[j] = float32((2*rng.Float64() - 1) * math.Ldexp(1, 7-int(bits)))
				}
				x[0] = DefaultClip // the range's ends are inside it
				x[1] = -DefaultClip
				w := 1 + rng.Uint64N(100000)
				xs, ws = append(xs, x), append(ws, w)
				m[i], wm[i], ids[i] = x, w, i
			}
			got, err := q.Aggregate(xs, ws)
			if err != nil {
				t.Fatal(err)
			}
			d := maxDiff(got, fedavg(m, wm, ids))
			if d > q.Bound()*(1+1e-9)+math.Ldexp(DefaultClip, -52) {
				t.Fatalf("scale 2^%d: error %g > bound %g", bits, d, q.Bound())
			}
			worst = max(worst, d)
		}
		// the bound is tight within a factor of 4 (it is not vacuous)
		if worst < q.Bound()/4 {
			t.Errorf("scale 2^%d: worst error %g, bound %g: the bound is loose or the test weak", bits, worst, q.Bound())
		}
	}
	// clipping is counted, non-finite values are refused
	q := Quantizer{Clip: 1, ScaleBits: 24}
	dst := make([]uint64, 4)
	if n, err := q.Encode(dst, []float32{2, -3, 0.5}, 1); err != nil || n != 2 {
		t.Fatalf("clipped %d (%v), want 2", n, err)
	}
	if _, err := q.Encode(dst, []float32{float32(math.NaN()), 0, 0}, 1); err == nil {
		t.Fatal("NaN accepted")
	}
	if _, err := q.Encode(dst, []float32{0, 0, 0}, 0); err == nil {
		t.Fatal("weight 0 accepted")
	}
}

func TestShamir(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var secret [SecretSize]byte
	for i := range secret {
		secret[i] = byte(rng.Uint32())
	}
	xs := []uint64{1, 2, 5, 9, 11, 12, 40}
	src := rand.NewChaCha8([32]byte{1})
	shares, err := split(secret, 4, xs, src)
	if err != nil {
		t.Fatal(err)
	}
	for trial := range 20 {
		p := rng.Perm(len(xs))[:4]
		var sx []uint64
		var ss []Share
		for _, i := range p {
			sx, ss = append(sx, xs[i]), append(ss, shares[i])
		}
		got, err := combine(sx, ss)
		if err != nil || got != secret {
			t.Fatalf("trial %d: %d shares do not reconstruct: %v", trial, len(p), err)
		}
		// t−1 shares do not give the secret
		if got, err := combine(sx[:3], ss[:3]); err == nil && got == secret {
			t.Fatalf("trial %d: 3 shares of a threshold-4 secret reconstructed it", trial)
		}
		// a corrupted share does not give the secret
		ss[trial%4][trial%limbs] = addMod(ss[trial%4][trial%limbs], 1)
		if got, err := combine(sx, ss); err == nil && got == secret {
			t.Fatalf("trial %d: a corrupted share reconstructed the secret", trial)
		}
	}
	if _, err := combine([]uint64{1, 1}, shares[:2]); err == nil {
		t.Fatal("two shares at one x accepted")
	}
}

func TestDefaultDegree(t *testing.T) {
	if k := DefaultDegree(10, 0.3); k != 9 {
		t.Errorf("10 sites: degree %d, want 9 (complete)", k)
	}
	if k := DefaultDegree(100, 0.3); k != 99 {
		t.Errorf("100 sites: degree %d, want 99 (complete)", k)
	}
	k := DefaultDegree(100000, 0.3)
	if k%2 != 0 || k >= 1000 {
		t.Fatalf("100000 sites: degree %d, want even and O(log n)", k)
	}
	if p := 100000 * binomialTail(k, k/2, 0.3); p > math.Ldexp(1, -20) {
		t.Fatalf("degree %d: failure bound %g > 2^-20", k, p)
	}
	if p := 100000 * binomialTail(k-2, (k-2)/2, 0.3); p <= math.Ldexp(1, -20) {
		t.Fatalf("degree %d is not the smallest", k)
	}
	if _, err := NewConfig(session("x"), sites(10), 4, Options{Degree: 3}); err == nil {
		t.Fatal("odd degree accepted")
	}
	if _, err := NewConfig(session("x"), sites(10), 4, Options{Threshold: 4}); err == nil {
		t.Fatal("a threshold of at most half the holders accepted")
	}
	if _, err := NewConfig(session("x"), []int{1, 1, 2}, 4, Options{}); err == nil {
		t.Fatal("a site listed twice accepted")
	}
}

// setup runs rounds 0 and 1 and returns the round ready for masked inputs.
func setup(t *testing.T, n int) (*round, map[int][]float32, map[int]uint64) {
	t.Helper()
	cfg, err := NewConfig(session("malformed"), sites(n), 16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := newRound(t, cfg)
	for _, id := range cfg.Sites {
		a, _ := r.clients[id].Advertise()
		if err := r.srv.ReceiveAdvertise(a); err != nil {
			t.Fatal(err)
		}
	}
	adv, _ := r.srv.KeysDone()
	for _, id := range cfg.Sites {
		sh, err := r.clients[id].ShareKeys(adv)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.srv.ReceiveShares(id, sh); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.srv.SharesDone(); err != nil {
		t.Fatal(err)
	}
	xs, ws := inputs(rand.New(rand.NewPCG(13, 14)), cfg.Sites, 16, 1)
	return r, xs, ws
}

func wantErr(t *testing.T, what string, err error, sub string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), sub) {
		t.Errorf("%s: error %v, want one containing %q", what, err, sub)
	}
}

func TestMalformedMessages(t *testing.T) {
	cfg, err := NewConfig(session("m"), sites(4), 16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cfg)
	c, _ := NewClient(cfg, cfg.Sites[0], nil)
	a, _ := c.Advertise()
	if err := srv.ReceiveAdvertise(a); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "duplicate keys", srv.ReceiveAdvertise(a), "twice")
	wantErr(t, "stranger", srv.ReceiveAdvertise(Advertise{From: 999, MaskKey: a.MaskKey, EncKey: a.EncKey}), "not among")
	bad := a
	bad.From, bad.MaskKey = cfg.Sites[1], a.MaskKey[:31]
	wantErr(t, "short key", srv.ReceiveAdvertise(bad), "mask key")
	_, err = NewClient(cfg, 999, nil)
	wantErr(t, "client of a stranger", err, "not among")

	r, xs, ws := setup(t, 4)
	id := r.cfg.Sites[0]
	in, _ := r.srv.Inbox(id)
	// tampered ciphertext
	tam := slices.Clone(in)
	tam[0].Ciphertext = slices.Clone(tam[0].Ciphertext)
	tam[0].Ciphertext[5] ^= 1
	c0 := r.clients[id]
	_, _, err = c0.MaskInput(tam, xs[id], ws[id])
	wantErr(t, "tampered share", err, "does not decrypt")
	// duplicate sender in an inbox
	r, xs, ws = setup(t, 4)
	in, _ = r.srv.Inbox(id)
	_, _, err = r.clients[id].MaskInput(append(in, in[0]), xs[id], ws[id])
	wantErr(t, "duplicate share", err, "two shares")
	// wrong input length
	r, xs, ws = setup(t, 4)
	in, _ = r.srv.Inbox(id)
	_, _, err = r.clients[id].MaskInput(in, xs[id][:3], ws[id])
	wantErr(t, "short input", err, "input of 3 values")
	// server: wrong masked length, duplicate, stranger
	r, _, _ = setup(t, 4)
	wantErr(t, "short masked", r.srv.ReceiveMasked(MaskedInput{From: id, Y: make([]uint64, 3)}), "has 3 words")
	m := MaskedInput{From: id, Y: make([]uint64, 17)}
	if err := r.srv.ReceiveMasked(m); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "duplicate masked", r.srv.ReceiveMasked(m), "twice")
	wantErr(t, "stranger masked", r.srv.ReceiveMasked(MaskedInput{From: 999, Y: make([]uint64, 17)}), "did not share")
	wantErr(t, "reveal too early", r.srv.ReceiveReveal(Reveal{From: id}), "out of turn")

	// a bad revealed share makes the unmasking fail, naming the site
	r, xs, ws = setup(t, 4)
	alive, sigs := maskAndSign(t, r, xs, ws)
	for i, s := range alive {
		rv, err := r.clients[s].Unmask(sigs)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			rv.Shares[0].Share[0] = addMod(rv.Shares[0].Share[0], 7)
			dup := rv
			dup.Shares = append(slices.Clone(rv.Shares), rv.Shares[0])
			wantErr(t, "duplicate owner", r.srv.ReceiveReveal(dup), "two shares")
			wrong := rv
			wrong.Shares = slices.Clone(rv.Shares)
			wrong.Shares[0].Kind = MaskKey
			wantErr(t, "wrong kind", r.srv.ReceiveReveal(wrong), "not its self-mask seed")
		}
		if err := r.srv.ReceiveReveal(rv); err != nil {
			t.Fatal(err)
		}
	}
	_, err = r.srv.Finish()
	wantErr(t, "corrupted share", err, "inconsistent")
}

// Decoding never panics: every truncation and random corruption of valid
// messages gives an error or a message, never a crash.
func TestDecodeGarbage(t *testing.T) {
	r, xs, ws := setup(t, 3)
	id := r.cfg.Sites[0]
	in, _ := r.srv.Inbox(id)
	m, _, err := r.clients[id].MaskInput(in, xs[id], ws[id])
	if err != nil {
		t.Fatal(err)
	}
	adv := Advertise{From: 1, MaskKey: make([]byte, 32), EncKey: make([]byte, 32)}
	msgs := [][]byte{MarshalAdvertise(adv), MarshalAdvertiseList([]Advertise{adv, adv}), MarshalShares(in), MarshalMasked(m),
		MarshalSurvivors([]int{1, 2}), MarshalReveal(Reveal{From: 1, Shares: []RevealedShare{{Owner: 2, Kind: SelfSeed}}}),
		MarshalAdvertise(Advertise{From: 2, MaskKey: make([]byte, 32), EncKey: make([]byte, 32), Cert: make([]byte, 40), Sig: make([]byte, 70)}),
		MarshalConsistency(Consistency{From: 1, Sig: make([]byte, 70)}), MarshalConsistencyList([]Consistency{{From: 1, Sig: make([]byte, 70)}, {From: 2}})}
	decode := func(b []byte) {
		UnmarshalAdvertise(b)
		UnmarshalAdvertiseList(b)
		UnmarshalShares(b)
		UnmarshalMasked(b)
		UnmarshalSurvivors(b)
		UnmarshalReveal(b)
		UnmarshalConsistency(b)
		UnmarshalConsistencyList(b)
		IsConsistency(b)
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for _, msg := range msgs {
		for n := range len(msg) {
			decode(msg[:n])
		}
		for range 200 {
			b := slices.Clone(msg)
			b[rng.IntN(len(b))] = byte(rng.Uint32())
			decode(b)
		}
	}
	if _, err := UnmarshalMasked(MarshalMasked(m)[:20]); err == nil || !strings.Contains(err.Error(), "masked input") {
		t.Fatalf("truncated masked input: %v", err)
	}
	if _, err := UnmarshalShares(MarshalMasked(m)); err == nil {
		t.Fatal("a masked input decoded as shares")
	}
	got, err := UnmarshalMasked(MarshalMasked(m))
	if err != nil || got.From != m.From || !slices.Equal(got.Y, m.Y) {
		t.Fatalf("masked input round trip: %v", err)
	}
	if !bytes.Equal(MarshalShares(in), MarshalShares(mustShares(t, MarshalShares(in)))) {
		t.Fatal("shares round trip")
	}
}

func mustShares(t *testing.T, b []byte) []EncryptedShare {
	t.Helper()
	s, err := UnmarshalShares(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// maskAndSign sends every site's masked input of r to the server and runs the
// consistency round: the sites alive and their signatures.
func maskAndSign(t *testing.T, r *round, xs map[int][]float32, ws map[int]uint64) ([]int, []Consistency) {
	t.Helper()
	for _, s := range r.cfg.Sites {
		in, _ := r.srv.Inbox(s)
		m, _, err := r.clients[s].MaskInput(in, xs[s], ws[s])
		if err != nil {
			t.Fatal(err)
		}
		if err := r.srv.ReceiveMasked(m); err != nil {
			t.Fatal(err)
		}
	}
	alive, _ := r.srv.MaskedDone()
	sigs, err := consistency(r.srv, r.clients, alive)
	if err != nil {
		t.Fatal(err)
	}
	return alive, sigs
}
