package optim

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/tensor"
)

func clone(v []float32) []float32 { return append([]float32(nil), v...) }

// TestSGDHandComputed checks three steps against the update written out in
// float64 (the first step must set buf = g, with no momentum decay).
func TestSGDHandComputed(t *testing.T) {
	tests := []struct {
		name        string
		lr, mom, wd float64
		nesterov    bool
		p0          []float64
		grads       [][]float64
	}{
		{"momentum+wd", 0.1, 0.9, 0.01, false, []float64{1, -2}, [][]float64{{0.5, 0.25}, {-1, 2}, {0.125, 0}}},
		{"nesterov", 0.05, 0.8, 0, true, []float64{0.5, 3}, [][]float64{{1, -1}, {2, 0.5}, {-0.5, 1}}},
		{"plain", 0.2, 0, 0.1, false, []float64{2, -1}, [][]float64{{1, 1}, {0.5, -0.5}, {0, 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewSGD(tc.mom, tc.wd, tc.nesterov)
			val := make([]float32, len(tc.p0))
			for i, v := range tc.p0 {
				val[i] = float32(v)
			}
			want := append([]float64(nil), tc.p0...)
			buf := make([]float64, len(want))
			for step, g64 := range tc.grads {
				grad := make([]float32, len(g64))
				for i := range g64 {
					grad[i] = float32(g64[i])
				}
				if err := o.Step(tc.lr, []Param{{Name: "w", Value: val, Grad: grad}}); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					g := g64[i] + tc.wd*want[i]
					if step == 0 {
						buf[i] = g
					} else {
						buf[i] = tc.mom*buf[i] + g
					}
					d := buf[i]
					if tc.nesterov {
						d = g + tc.mom*buf[i]
					}
					if tc.mom == 0 {
						d = g
					}
					want[i] -= tc.lr * d
				}
				for i := range want {
					if math.Abs(float64(val[i])-want[i]) > 1e-6*(1+math.Abs(want[i])) {
						t.Fatalf("step %d: p[%d] = %v, want %v", step, i, val[i], want[i])
					}
				}
			}
			if o.Steps() != len(tc.grads) {
				t.Errorf("Steps() = %d, want %d", o.Steps(), len(tc.grads))
			}
		})
	}
}

func TestAdamWHandComputed(t *testing.T) {
	const lr, wd = 1e-2, 0.1
	o := NewAdamW(wd)
	val := []float32{0.5, -1.5, 2}
	grads := [][]float32{{0.1, -0.2, 0.3}, {-0.4, 0.5, 0.0}, {1, 1, -1}}
	want := []float64{0.5, -1.5, 2}
	m := make([]float64, 3)
	v := make([]float64, 3)
	for step, g := range grads {
		if err := o.Step(lr, []Param{{Name: "w", Value: val, Grad: clone(g)}}); err != nil {
			t.Fatal(err)
		}
		tt := float64(step + 1)
		for i := range want {
			gi := float64(g[i])
			want[i] *= 1 - lr*wd
			m[i] = 0.9*m[i] + 0.1*gi
			v[i] = 0.999*v[i] + 0.001*gi*gi
			mhat := m[i] / (1 - math.Pow(0.9, tt))
			den := math.Sqrt(v[i])/math.Sqrt(1-math.Pow(0.999, tt)) + 1e-8
			want[i] -= lr * mhat / den
		}
		for i := range want {
			if math.Abs(float64(val[i])-want[i]) > 1e-6*(1+math.Abs(want[i])) {
				t.Fatalf("step %d: p[%d] = %v, want %v", step, i, val[i], want[i])
			}
		}
	}
	// A first Adam step moves each coordinate with a non-zero gradient by
	// about lr, independently of the gradient's scale.
	o2 := NewAdamW(0)
	p := []float32{0, 0}
	if err := o2.Step(lr, []Param{{Name: "w", Value: p, Grad: []float32{1e-3, -50}}}); err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(p[0])+lr) > 1e-5 || math.Abs(float64(p[1])-lr) > 1e-6 {
		t.Errorf("first AdamW step = %v, want ≈ [-%g %g]", p, lr, lr)
	}
}

func TestNilGradSkipped(t *testing.T) {
	for _, o := range []Optimizer{NewSGD(0.9, 0.1, false), NewAdamW(0.1)} {
		p := []float32{1, 2}
		if err := o.Step(0.1, []Param{{Name: "frozen", Value: p}}); err != nil {
			t.Fatal(err)
		}
		if p[0] != 1 || p[1] != 2 {
			t.Errorf("%T changed a param without gradient: %v", o, p)
		}
		if len(o.State()) != 1 {
			t.Errorf("%T kept state for a param without gradient: %v", o, o.State())
		}
	}
}

func TestStepRejectsBadParams(t *testing.T) {
	for _, o := range []Optimizer{NewSGD(0.9, 0, false), NewAdamW(0)} {
		p := []float32{1, 2}
		bad := [][]Param{
			{{Name: "a", Value: p, Grad: []float32{1}}},
			{{Name: "a", Value: p, Grad: []float32{1, 1}}, {Name: "a", Value: p, Grad: []float32{1, 1}}},
			{{Name: "", Value: p, Grad: []float32{1, 1}}},
		}
		for _, params := range bad {
			if err := o.Step(0.1, params); err == nil {
				t.Errorf("%T accepted %v", o, params)
			}
		}
		if p[0] != 1 || p[1] != 2 {
			t.Errorf("%T changed params on a failed step: %v", o, p)
		}
		// Once a buffer exists, a param of another length is refused.
		if err := o.Step(0.1, []Param{{Name: "a", Value: p, Grad: []float32{1, 1}}}); err != nil {
			t.Fatal(err)
		}
		err := o.Step(0.1, []Param{{Name: "a", Value: []float32{1, 2, 3}, Grad: []float32{1, 1, 1}}})
		if err == nil || !strings.Contains(err.Error(), `"a"`) {
			t.Errorf("%T: length change error = %v, want one naming the param", o, err)
		}
	}
}

// TestStateRoundTrip interrupts training after two steps, moves the state
// into a fresh optimizer and checks the continuation is bit-identical.
func TestStateRoundTrip(t *testing.T) {
	makers := map[string]func() Optimizer{
		"sgd":   func() Optimizer { return NewSGD(0.9, 5e-4, false) },
		"adamw": func() Optimizer { return NewAdamW(0.01) },
	}
	grads := [][]float32{{0.3, -0.1, 0.7}, {0.2, 0.4, -0.5}, {-1, 0.1, 0.2}, {0.05, 0.05, 0.05}}
	for name, mk := range makers {
		t.Run(name, func(t *testing.T) {
			run := func(o Optimizer, p []float32, from, to int) {
				for s := from; s < to; s++ {
					if err := o.Step(0.01, []Param{{Name: "w", Value: p, Grad: clone(grads[s])}, {Name: "b", Value: p[:1], Grad: clone(grads[s][:1])}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			ref := []float32{1, 2, 3}
			a := mk()
			run(a, ref, 0, 4)

			got := []float32{1, 2, 3}
			b := mk()
			run(b, got, 0, 2)
			st := b.State()
			c := mk()
			if err := c.LoadState(st); err != nil {
				t.Fatal(err)
			}
			st["steps"].Data[1] = 99 // State must be a copy
			if c.Steps() != 2 {
				t.Errorf("restored Steps() = %d, want 2", c.Steps())
			}
			run(c, got, 2, 4)
			for i := range ref {
				if math.Float32bits(ref[i]) != math.Float32bits(got[i]) {
					t.Fatalf("resumed p[%d] = %v, uninterrupted %v", i, got[i], ref[i])
				}
			}
		})
	}
}

func TestLoadStateErrors(t *testing.T) {
	sgd := NewSGD(0.9, 0, false)
	adam := NewAdamW(0)
	p := []Param{{Name: "w", Value: []float32{1, 2}, Grad: []float32{1, 1}}}
	if err := sgd.Step(0.1, p); err != nil {
		t.Fatal(err)
	}
	if err := adam.Step(0.1, p); err != nil {
		t.Fatal(err)
	}
	without := func(st tensor.Named, key string) tensor.Named { delete(st, key); return st }
	with := func(st tensor.Named, key string, v *tensor.Tensor) tensor.Named { st[key] = v; return st }
	tests := []struct {
		name  string
		o     Optimizer
		st    tensor.Named
		token string
	}{
		{"sgd missing steps", NewSGD(0.9, 0, false), without(sgd.State(), "steps"), `"steps"`},
		{"sgd bad steps", NewSGD(0.9, 0, false), with(sgd.State(), "steps", &tensor.Tensor{Shape: []int{2}, Data: []float32{0, 1.5}}), `"steps"`},
		{"sgd 2-D buffer", NewSGD(0.9, 0, false), with(sgd.State(), "momentum_buffer/w", &tensor.Tensor{Shape: []int{1, 2}, Data: []float32{0, 1}}), `"momentum_buffer/w"`},
		{"adam state into sgd", NewSGD(0.9, 0, false), adam.State(), `"exp_avg`},
		{"sgd state into adam", NewAdamW(0), sgd.State(), `"momentum_buffer/w"`},
		{"adam missing moment", NewAdamW(0), without(adam.State(), "exp_avg_sq/w"), `"exp_avg_sq/w"`},
		{"adam missing step", NewAdamW(0), without(adam.State(), "step/w"), `"step/w"`},
		{"adam moment lengths", NewAdamW(0), with(adam.State(), "exp_avg/w", &tensor.Tensor{Shape: []int{3}, Data: []float32{0, 1, 2}}), `"exp_avg/w"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.LoadState(tc.st)
			if err == nil || !strings.Contains(err.Error(), tc.token) {
				t.Errorf("LoadState error = %v, want one containing %s", err, tc.token)
			}
		})
	}
}

func TestCountEncoding(t *testing.T) {
	for _, n := range []int{0, 1, countBase - 1, countBase, 3*countBase + 17, 1 << 40} {
		got, err := countValue("steps", countTensor(n))
		if err != nil || got != n {
			t.Errorf("count %d round-tripped to %d, %v", n, got, err)
		}
	}
}

func TestSchedules(t *testing.T) {
	c := Cosine{Base: 0.1, Min: 0.001, WarmupStart: 0.01, Warmup: 4, Total: 14}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		step int
		want float64
	}{
		{-3, 0.01},
		{0, 0.01},
		{2, 0.01 + 0.09*2/4},
		{3, 0.01 + 0.09*3/4},
		{4, 0.1}, // warmup boundary: cosine starts at Base
		{9, 0.001 + 0.099*(1+math.Cos(math.Pi/2))/2}, // halfway
		{13, 0.001 + 0.099*(1+math.Cos(math.Pi*9/10))/2},
		{14, 0.001}, // end: Min
		{100, 0.001},
	}
	for _, tc := range tests {
		if got := c.LR(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("cosine LR(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	// Without warmup the schedule is PyTorch's CosineAnnealingLR, whose
	// recursive form we replay in float64 here.
	pure := Cosine{Base: 0.002, Min: 0, Total: 10}
	lr := pure.Base
	for e := 0; e <= 10; e++ {
		if math.Abs(pure.LR(e)-lr) > 1e-12 {
			t.Errorf("cosine LR(%d) = %v, PyTorch recursion %v", e, pure.LR(e), lr)
		}
		te, tm := float64(e+1), 10.0
		lr = (1+math.Cos(math.Pi*te/tm))/(1+math.Cos(math.Pi*(te-1)/tm))*(lr-pure.Min) + pure.Min
	}
	if Constant(0.3).LR(1000) != 0.3 {
		t.Error("constant schedule changed")
	}
	for _, bad := range []Cosine{{Warmup: -1}, {Warmup: 5, Total: 4}, {Base: -1, Total: 1}} {
		if bad.Validate() == nil {
			t.Errorf("Validate accepted %+v", bad)
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	p := []Param{{Name: "a", Value: make([]float32, 2), Grad: []float32{3, 0}}, {Name: "b", Value: make([]float32, 1), Grad: []float32{4}}}
	if n := ClipGradNorm(p, 1); math.Abs(n-5) > 1e-9 {
		t.Errorf("norm = %v, want 5", n)
	}
	if math.Abs(float64(p[0].Grad[0])-0.6) > 1e-6 || math.Abs(float64(p[1].Grad[0])-0.8) > 1e-6 {
		t.Errorf("clipped grads %v %v, want 0.6 0.8", p[0].Grad, p[1].Grad)
	}
	ZeroGrad(p)
	if p[0].Grad[0] != 0 || p[1].Grad[0] != 0 {
		t.Error("ZeroGrad left values")
	}
}

// readF32 reads the F32 tensors of a safetensors file (test helper; the
// project's safetensors package is not a dependency of optim).
func readF32(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	out := map[string][]float32{}
	for k, raw := range hdr {
		var e struct {
			Dtype   string `json:"dtype"`
			Offsets [2]int `json:"data_offsets"`
		}
		if k == "__metadata__" || json.Unmarshal(raw, &e) != nil || e.Dtype != "F32" {
			continue
		}
		v := make([]float32, (e.Offsets[1]-e.Offsets[0])/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[e.Offsets[0]+4*i:]))
		}
		out[k] = v
	}
	return out
}

// TestSGDMatchesPyTorch replays the fixture's one torch.optim.SGD step (lr
// 0.001, momentum 0.9, weight decay 5e-4, fresh optimizer) on every adapter
// parameter; the result must match bit for bit.
func TestSGDMatchesPyTorch(t *testing.T) {
	for _, dir := range []string{"mma-l2", "mma-l0"} {
		base := filepath.Join("..", "testdata", dir)
		init := readF32(t, filepath.Join(base, "adapters_init.safetensors"))
		step := readF32(t, filepath.Join(base, "step.safetensors"))
		var params []Param
		for name, v := range init {
			g, ok := step["grad."+name]
			if !ok {
				t.Fatalf("%s: no gradient for %q", dir, name)
			}
			params = append(params, Param{Name: name, Value: clone(v), Grad: g})
		}
		if len(params) == 0 {
			t.Fatalf("%s: no parameters", dir)
		}
		if err := NewSGD(0.9, 5e-4, false).Step(0.001, params); err != nil {
			t.Fatal(err)
		}
		for _, p := range params {
			want := step["step1."+p.Name]
			if len(want) != len(p.Value) {
				t.Fatalf("%s: %q: %d values, fixture %d", dir, p.Name, len(p.Value), len(want))
			}
			for i := range want {
				if d := math.Abs(float64(p.Value[i] - want[i])); d != 0 {
					t.Fatalf("%s: %q[%d] = %v, PyTorch %v", dir, p.Name, i, p.Value[i], want[i])
				}
			}
		}
	}
}
