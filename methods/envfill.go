package methods

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/progress"
)

// Fill computes and caches the frozen prefixes a run needs: every test
// image once and, unless the run augments online, every training view once
// (views K: K augmented views per image; 0: the center crop). With noCache
// the stores recompute records from the images whenever they are read.
func (e *Env) Fill(ctx context.Context, views int, noCache bool, bar *progress.Bar) error {
	e.TrainRecs, e.TestRecs = map[int][]int{}, map[int]int{}
	if noCache {
		e.registerUncached(views)
		return nil
	}
	if err := e.fillTest(ctx, bar); err != nil {
		return err
	}
	if e.Online {
		return nil
	}
	return e.fillTrain(ctx, views, bar)
}

// registerUncached switches the cache off: stores that recompute prefixes.
func (e *Env) registerUncached(views int) {
	test := prefixcache.NewUncached(e.Prefixer, e.Task.Test, e.Seed)
	for _, i := range e.Task.UsedTest() {
		e.TestRecs[i] = test.Add(prefixcache.View{Item: i})
	}
	train := prefixcache.NewUncached(e.Prefixer, e.Task.Train, e.Seed)
	for _, i := range e.Task.UsedTrain() {
		if views == 0 {
			e.TrainRecs[i] = []int{train.Add(prefixcache.View{Item: i})}
		}
		for v := 0; v < views; v++ {
			e.TrainRecs[i] = append(e.TrainRecs[i], train.Add(prefixcache.View{Item: i, Index: v, Augment: true}))
		}
	}
	if e.TestStore != nil {
		e.TestStore.Close()
	}
	if e.TrainStore != nil {
		e.TrainStore.Close()
	}
	e.TestStore, e.TrainStore = test, train
	if e.Evaluator != nil {
		e.Evaluator.Source = test
	}
}

func (e *Env) fillTest(ctx context.Context, bar *progress.Bar) error {
	used := e.Task.UsedTest()
	vs := make([]prefixcache.View, len(used))
	for k, i := range used {
		vs[k] = prefixcache.View{Item: i}
	}
	bar.Describe("test-image prefixes")
	recs, err := e.Prefixer.Fill(ctx, e.Task.Test, vs, e.Seed, e.TestStore, bar)
	if err != nil {
		return fmt.Errorf("test prefixes: %w", err)
	}
	for k, i := range used {
		e.TestRecs[i] = recs[k]
	}
	return nil
}

func (e *Env) fillTrain(ctx context.Context, views int, bar *progress.Bar) error {
	used := e.Task.UsedTrain()
	per := max(views, 1)
	vs := make([]prefixcache.View, 0, len(used)*per)
	for _, i := range used {
		if views == 0 {
			vs = append(vs, prefixcache.View{Item: i})
		}
		for v := 0; v < views; v++ {
			vs = append(vs, prefixcache.View{Item: i, Index: v, Augment: true})
		}
	}
	bar.Describe("training-view prefixes")
	recs, err := e.Prefixer.Fill(ctx, e.Task.Train, vs, e.Seed, e.TrainStore, bar)
	if err != nil {
		return fmt.Errorf("training prefixes: %w", err)
	}
	for k, i := range used {
		e.TrainRecs[i] = recs[k*per : (k+1)*per]
	}
	return nil
}
