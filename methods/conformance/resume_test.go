package conformance

import (
	"fmt"
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/preprocess"
)

// TestResumeCoordinator: `pfedmma run` stopped after round 1, and after
// round 2, then resumed (--resume, every process state lost: strategy,
// clients, caches) ends bit-identical to the uninterrupted run.
func TestResumeCoordinator(t *testing.T) {
	skipPureGo(t)
	forEach(t, func(t *testing.T, name string) {
		r := ref(t, name)
		for _, stop := range []int{0, 1} {
			o := r.o
			o.OutDir = t.TempDir()
			if _, err := simulate(t, o, stop, nil); err == nil {
				t.Fatalf("stopping after round %d: the run did not stop", stop+1)
			}
			o.Resume = true
			res, err := simulate(t, o, -1, nil)
			if err != nil {
				t.Fatalf("resume after round %d: %v", stop+1, err)
			}
			compare(t, fmt.Sprintf("resumed after round %d", stop+1), r.oc, simOutcome(t, o, name, res))
		}
	})
}

// TestPredictEqualsEvaluation: the Predictor `pfedmma predict` rebuilds
// from each site's saved tensors scores every image of the site's
// evaluation sets — preprocessed from the image, one at a time — with the
// logits the site's last evaluation computed, bit for bit.
//
// make test's pure-Go pass checks pureGoPredict's methods only (see there).
func TestPredictEqualsEvaluation(t *testing.T) {
	check := func(t *testing.T, name string) { checkPredict(t, name, ref(t, name)) }
	if pureGo {
		for _, name := range pureGoPredict {
			t.Run(name, func(t *testing.T) { check(t, name) })
		}
		return
	}
	forEach(t, check)
}

// pureGoPredict are the methods whose predict = evaluation make test's
// pure-Go pass (-tags purego) checks: the flagship's adapters and a
// CoOp-style prompt, so that the tiny world run, its evaluation and the
// rebuilt Predictor go through the fallback GEMM and the pure-Go kernels on
// both paths. The check compares two runs of the same code on the same
// shapes, a property of the seam rather than of the arithmetic: the main
// pass checks it for every method, and each method's numerics are held to
// its fixtures under -tags purego by its own package's tests.
var pureGoPredict = []string{"pfedmma", "promptfl"}

// checkPredict compares, bit for bit, the logits of the Predictors rebuilt
// from r's saved site tensors with r's recorded evaluation logits.
func checkPredict(t *testing.T, name string, r *reference) {
	t.Helper()
	{
		meth, err := methods.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		m, tok, err := loadModel(t, r.o)
		if err != nil {
			t.Fatal(err)
		}
		task := r.res.Task
		tf := preprocess.CLIPTransform(m.W.Config.Vision.ImageSize)
		checked := 0
		for id := range numClients {
			saved, ok := r.oc.sites[id]
			if !ok {
				t.Fatalf("site %d saved no tensors for predict", id)
			}
			p, err := meth.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: r.o.Template}, r.o.Sections[name], saved)
			if err != nil {
				t.Fatalf("site %d: predictor: %v", id, err)
			}
			c := r.logits.set[id]
			logits := r.logits.by[id]
			if c == nil || len(logits) != len(c.Evals) {
				t.Fatalf("site %d: no evaluation recorded", id)
			}
			for si, set := range c.Evals {
				var classes []string
				for _, ci := range task.Spaces[set.Space].Classes {
					classes = append(classes, task.Dataset.Classes[ci])
				}
				C := len(classes)
				if len(logits[si]) != len(set.Images)*C {
					t.Fatalf("site %d set %s: %d logits recorded for %d images of %d classes", id, set.Name, len(logits[si]), len(set.Images), C)
				}
				for k, img := range set.Images {
					im, err := task.Test[img].Source.Load()
					if err != nil {
						t.Fatal(err)
					}
					got, err := p.Logits(tf.Eval(im), 1, classes)
					if err != nil {
						t.Fatalf("site %d: predict: %v", id, err)
					}
					want := logits[si][k*C : (k+1)*C]
					for j := range want {
						if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
							t.Fatalf("site %d, set %s, image %d, class %d: predict %v, evaluation %v (all: %v vs %v)", id, set.Name, k, j, got[j], want[j], got, want)
						}
					}
					checked++
				}
			}
		}
		if checked == 0 {
			t.Fatal("no image compared")
		}
	}
}
