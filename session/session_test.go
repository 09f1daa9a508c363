package session

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// fakeMethod builds a plan with its strategy (nil: a method that does not
// train) and counts its builds.
type fakeMethod struct {
	methods.Method // Info, Depth, … are not called
	strat          federation.Strategy
	builds         int
	env            *methods.Env
}

func (m *fakeMethod) Info() methods.Info { return methods.Info{Name: "fake"} }

func (m *fakeMethod) Build(env *methods.Env, _ config.Section) (*methods.Plan, error) {
	m.builds++
	m.env = env
	return &methods.Plan{Strategy: m.strat}, nil
}

func fedAvg(uniform bool) *strategy.FedAvg {
	return &strategy.FedAvg{Initial: tensor.Named{"w": tensor.New(2)}, Uniform: uniform}
}

// TestPlanWrapsAsConfigured: without an active aggregation section the
// plan keeps the method's own strategy; with one, the strategy is wrapped
// (its name says the rule and the clipping).
func TestPlanWrapsAsConfigured(t *testing.T) {
	own := fedAvg(false)
	m := &fakeMethod{strat: own}
	env := &methods.Env{}
	plan, err := Federation{}.Plan(m, env, nil)
	if err != nil || plan.Strategy != own || m.env != env {
		t.Fatalf("plain plan: strategy %v (want the method's own), env passed %v, err %v", plan.Strategy, m.env == env, err)
	}
	plan, err = Federation{Aggregation: config.Aggregation{Rule: config.RuleMedian, ClipNorm: 1}}.Plan(m, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Strategy == own || plan.Strategy.Name() != "fedavg+median+clip(1)" {
		t.Fatalf("median + clip_norm 1: strategy %q, want the method's wrapped as fedavg+median+clip(1)", plan.Strategy.Name())
	}
	idle := &fakeMethod{}
	if plan, err := (Federation{Aggregation: config.Aggregation{Rule: config.RuleMedian}}).Plan(idle, env, nil); err != nil || plan.Strategy != nil {
		t.Fatalf("a method that does not train: %v, %v; want its plan as it is", plan, err)
	}
}

// TestSecureRefusals: secure aggregation is refused, naming the key, with
// whatever needs each site's update at the server; a plain mean takes it.
func TestSecureRefusals(t *testing.T) {
	for _, c := range []struct {
		name  string
		f     Federation
		strat federation.Strategy
		want  string // "" accepted
	}{
		{"mean", Federation{Secure: true}, fedAvg(true), ""},
		{"median off", Federation{Aggregation: config.Aggregation{Rule: config.RuleMedian}}, fedAvg(false), ""},
		{"median", Federation{Secure: true, Aggregation: config.Aggregation{Rule: config.RuleMedian}}, fedAvg(false), "aggregation.rule median"},
		{"clip", Federation{Secure: true, Aggregation: config.Aggregation{ClipNorm: 2}}, fedAvg(false), "aggregation.clip_norm"},
		{"dp", Federation{Secure: true, Aggregation: config.Aggregation{DP: config.DP{NoiseMultiplier: 1, Clip: 1, Delta: 1e-5}}}, fedAvg(false), "aggregation.dp"},
		{"compress", Federation{Secure: true, Compress: compress.FP16}, fedAvg(false), "federation.compress fp16"},
		{"pool", Federation{Secure: true}, &strategy.Relay{}, "needs each site's tensors"},
	} {
		_, err := c.f.Plan(&fakeMethod{strat: c.strat}, &methods.Env{}, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), secureKey)):
			t.Errorf("%s: error %v, want one naming %s and %q", c.name, err, secureKey, c.want)
		}
	}
}

// TestCoordinatorSchedule: the coordinator runs the strategy on the
// federation's schedule, with the simulation's secure aggregator (weighting
// as the mean does) only when secure aggregation is on.
func TestCoordinatorSchedule(t *testing.T) {
	f := Federation{Rounds: 7, Fraction: 0.5, Seed: 11, EvalEvery: 3, EvaluateAlone: true}
	s := fedAvg(true)
	co := f.Coordinator(s)
	if co.Strategy != s || co.Rounds != 7 || co.Fraction != 0.5 || co.Seed != 11 || co.EvalEvery != 3 || !co.EvaluateAlone || co.Secure != nil {
		t.Fatalf("coordinator %+v: want the strategy on the federation's schedule, no secure aggregator", co)
	}
	for _, uniform := range []bool{true, false} {
		f.Secure = true
		sec, ok := f.Coordinator(fedAvg(uniform)).Secure.(*federation.SimulatedSecure)
		if !ok || sec.Uniform != uniform {
			t.Errorf("secure aggregation of a mean (uniform %v): %#v", uniform, sec)
		}
	}
	if f.SecureAggregator(nil) != nil {
		t.Error("a secure aggregator for a method that does not train")
	}
}

// recorder is a client proxy that keeps what it received and uploads up.
type recorder struct {
	got tensor.Named
	up  tensor.Named
}

func (r *recorder) ID() int          { return 3 }
func (r *recorder) NumExamples() int { return 1 }
func (r *recorder) Fit(_ context.Context, ins federation.FitIns) (federation.FitRes, error) {
	r.got = ins.Params
	return federation.FitRes{Params: r.up.Clone()}, nil
}
func (r *recorder) Evaluate(_ context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	r.got = ins.Params
	return federation.EvaluateRes{}, nil
}

// values is a tensor of the given values.
func values(v ...float32) *tensor.Tensor {
	t := tensor.New(len(v))
	copy(t.Data, v)
	return t
}

// TestProxyCompresses: with fp16, a simulated client receives and uploads
// its tensors rounded to half precision, as over the wire; without
// compression the proxy is the client's own.
func TestProxyCompresses(t *testing.T) {
	r := &recorder{up: tensor.Named{"u": values(1.0001, -3)}}
	if p := (Federation{}).Proxy(r); p != federation.ClientProxy(r) {
		t.Fatal("no compression: the proxy was wrapped")
	}
	p := Federation{Compress: compress.FP16}.Proxy(r)
	res, err := p.Fit(context.Background(), federation.FitIns{Params: tensor.Named{"w": values(0.1, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	// float16 has a 10-bit mantissa: 0.1 → 0.0999755859375, 1.0001 → 1
	if got := r.got["w"].Data[0]; got != float32(0.0999755859375) || r.got["w"].Data[1] != 2 {
		t.Errorf("download: the client received %v, want 0.1 rounded to half precision (0.0999755859375), 2", r.got["w"].Data)
	}
	if got := res.Params["u"].Data; got[0] != 1 || got[1] != -3 {
		t.Errorf("upload: %v, want [1 -3] (1.0001 rounded to half precision)", got)
	}
	if _, err := p.Evaluate(context.Background(), federation.EvaluateIns{Params: tensor.Named{"e": values(math.Pi)}}); err != nil {
		t.Fatal(err)
	}
	if got := r.got["e"].Data[0]; got != 3.140625 {
		t.Errorf("evaluation download: %v, want π in half precision (3.140625)", got)
	}
}

// TestBuild: Build plans once on the method's copy of the env it is given
// (the session's Env), and gives a
// coordinator of the wrapped strategy only to a method that trains.
func TestBuild(t *testing.T) {
	m := &fakeMethod{strat: fedAvg(false)}
	if _, err := Build(Config{Method: m}); err == nil || !strings.Contains(err.Error(), "fake") {
		t.Fatalf("no env: %v, want an error naming the method", err)
	}
	env := &methods.Env{Task: &protocol.Task{}}
	s, err := Build(Config{Env: env, Method: m, Federation: Federation{Rounds: 4, Aggregation: config.Aggregation{Rule: config.RuleMedian}}})
	if err != nil {
		t.Fatal(err)
	}
	if m.builds != 1 || s.Env != m.env || s.Env.Task != env.Task || s.Coordinator == nil || s.Coordinator.Strategy != s.Plan.Strategy ||
		s.Coordinator.Rounds != 4 || s.Plan.Strategy.Name() != "fedavg+median" {
		t.Fatalf("session %+v (builds %d): want one build on the env, a coordinator of 4 rounds of the wrapped strategy", s, m.builds)
	}
	s, err = Build(Config{Env: env, Method: &fakeMethod{}})
	if err != nil || s.Coordinator != nil {
		t.Fatalf("a method that does not train: coordinator %v, %v; want none", s.Coordinator, err)
	}
}

// TestBuildLeavesEnv: two methods built on one frozen env with different
// training loaders (train.drop_last) each build on their own options, the
// first keeps its own after the second is built (the second's differs from
// the shared env's), and the shared env's
// training options and frozen parts are as they were before either build.
func TestBuildLeavesEnv(t *testing.T) {
	task := &protocol.Task{}
	env := &methods.Env{Task: task, Seed: 7, Train: train.Options{Epochs: 2, Batch: 4, LR: 0.5}}
	before := env.Train
	drops, keeps := &fakeMethod{strat: fedAvg(false)}, &fakeMethod{strat: fedAvg(false)}
	b, err := Build(Config{Env: env, Method: keeps, DropLast: false})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(Config{Env: env, Method: drops, DropLast: true})
	if err != nil {
		t.Fatal(err)
	}
	if !drops.env.Train.DropLast || !a.Env.Train.DropLast {
		t.Errorf("the drop_last method's env has DropLast false, want true")
	}
	if keeps.env.Train.DropLast || b.Env.Train.DropLast {
		t.Errorf("the first method's env has DropLast true after the second build, want false")
	}
	if env.Train != before {
		t.Errorf("shared env's training options %+v after two builds, want them unchanged (%+v)", env.Train, before)
	}
	for _, e := range []*methods.Env{a.Env, b.Env} {
		if e == env || e.Task != task || e.Seed != 7 || e.Train.LR != 0.5 || e.Train.Epochs != 2 {
			t.Errorf("method env %+v: want a copy of the shared env with its frozen parts and options", e)
		}
	}
}
