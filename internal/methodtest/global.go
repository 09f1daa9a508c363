package methodtest

import (
	"context"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// GlobalModel checks a method whose clients share their whole model: with
// every client (tasks[i] the client's task) scoring one shared evaluation
// set, two full rounds upload bytesUp bytes in the second and every client
// then scores the same (global) model and keeps it as its site.
func GlobalModel(t *testing.T, plan *methods.Plan, tasks []*protocol.ClientTask, bytesUp int64) {
	t.Helper()
	shared := tasks[0].Evals[0]
	for _, task := range tasks {
		task.Evals = []*protocol.EvalSet{shared}
	}
	co := Coordinator(plan, t.TempDir(), 2)
	co.Fraction = 1
	hist, err := co.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rep := hist.Rounds[1]
	if rep.BytesUp != bytesUp {
		t.Errorf("uploaded %d bytes, want %d (the whole model from every client)", rep.BytesUp, bytesUp)
	}
	for id, m := range rep.Eval {
		if m["acc"] != rep.Eval[0]["acc"] {
			t.Errorf("client %d scores %v, client 0 %v: not one global model", id, m["acc"], rep.Eval[0]["acc"])
		}
	}
	g := plan.Global()
	for i := range plan.Clients {
		site, _ := plan.Site(i)
		if d := tensortest.BitsDiff(site, g); d != "" {
			t.Errorf("site %d keeps something else than the global model (%s)", i, d)
		}
	}
}

// EvaluateReceivesGlobal checks that client 0 of a two-client plan, whose
// parameters are p, scores the model its evaluation instruction carries —
// the strategy's new average, sent by ConfigureEvaluate to every client —
// and that nothing the strategy holds in this process reaches the client
// by another way: after an in-process aggregation the client still holds
// its own trained model until the evaluation instruction arrives, exactly
// as a networked site.
func EvaluateReceivesGlobal(t *testing.T, plan *methods.Plan, p tensor.Named) {
	t.Helper()
	c := plan.Clients[0]
	down := tensor.Named{}
	for name, v := range p {
		d := v.Clone()
		for i := range d.Data {
			d.Data[i] = float32(i%7) * 0.01
		}
		down[name] = d
	}
	res, err := c.Fit(context.Background(), federation.FitIns{Round: 0, Params: down})
	if err != nil {
		t.Fatal(err)
	}
	if d := tensortest.BitsDiff(res.Params, down); d == "" {
		t.Fatal("training did not move the model: the test cannot tell the two apart")
	}
	if err := plan.Strategy.Init([]federation.ClientInfo{{ID: 0, NumExamples: 1}, {ID: 1, NumExamples: 3}}); err != nil {
		t.Fatal(err)
	}
	other := res.Params.Clone()
	for _, v := range other {
		for i := range v.Data {
			v.Data[i] *= 0.5
		}
	}
	if err := plan.Strategy.Aggregate(0, []federation.FitResult{{ClientID: 0, NumExamples: 1, Params: res.Params}, {ClientID: 1, NumExamples: 3, Params: other}}, nil); err != nil {
		t.Fatal(err)
	}
	if d := tensortest.BitsDiff(p, res.Params); d != "" {
		t.Fatalf("the in-process aggregation reached the client without an instruction (%s)", d)
	}
	ins, err := federation.ConfigureEvaluate(plan.Strategy, 0, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := tensortest.BitsDiff(ins[0], plan.Global()); d != "" || len(ins) != 2 {
		t.Fatalf("ConfigureEvaluate does not send every client the new global model (%d clients, %s)", len(ins), d)
	}
	if _, err := c.Evaluate(context.Background(), federation.EvaluateIns{Round: 0, Params: ins[0]}); err != nil {
		t.Fatal(err)
	}
	if d := tensortest.BitsDiff(p, plan.Global()); d != "" {
		t.Fatalf("the client does not score and keep the global model it was sent (%s)", d)
	}
	if d := tensortest.BitsDiff(p, res.Params); d == "" {
		t.Fatal("the global model equals the client's own: the test cannot tell them apart")
	}
	site, _ := plan.Site(0)
	if d := tensortest.BitsDiff(site, plan.Global()); d != "" {
		t.Errorf("the site keeps something else than the model it scored (%s)", d)
	}
}
