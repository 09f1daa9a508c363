package protocol

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// ValidationMetric is the metric name of the validation sets held out of
// the clients' training images (protocol.validation): what model selection
// and tuning read, never a test image.
const ValidationMetric = "val"

// validationStream is the random stream of the validation draw (distinct
// from the partition's streams under the same seed).
const validationStream = 0x7a1d

// holdOutValidation moves a seeded fraction f of every client's training
// images, per training label (rounded; at least one image per client), out
// of its training set into an evaluation set named [ValidationMetric] over
// the client's training label space. The held-out images are appended to
// t.Test (after every test image, so test indices are unchanged) and scored
// with the evaluation transform; no test image is ever a validation image.
// f = 0 leaves t untouched.
func holdOutValidation(t *Task, f float64, seed uint64) error {
	if f == 0 {
		return nil
	}
	if math.IsNaN(f) || f < 0 || f >= 1 {
		return fmt.Errorf("protocol.validation: %v not in [0, 1)", f)
	}
	rng := rand.New(rand.NewPCG(seed, validationStream))
	test := slices.Clip(slices.Clone(t.Test)) // never append into the dataset's slice
	for ci := range t.Clients {
		c := &t.Clients[ci]
		if len(c.Train) < 2 {
			return fmt.Errorf("protocol.validation: %v: client %d has %d training image(s); it must keep at least one after holding out a validation image (lower protocol.validation to 0, or give clients more images)", f, c.ID, len(c.Train))
		}
		// positions in c.Train per training label, labels in order
		byLabel := map[int][]int{}
		for k, l := range c.Labels {
			byLabel[l] = append(byLabel[l], k)
		}
		labels := make([]int, 0, len(byLabel))
		for l := range byLabel {
			labels = append(labels, l)
		}
		slices.Sort(labels)
		hold := make([]bool, len(c.Train))
		n := 0
		for _, l := range labels {
			ks := byLabel[l]
			k := int(math.Round(f * float64(len(ks))))
			for _, p := range rng.Perm(len(ks))[:k] {
				hold[ks[p]] = true
			}
			n += k
		}
		if n == 0 {
			hold[rng.IntN(len(c.Train))] = true
			n = 1
		}
		if n >= len(c.Train) {
			return fmt.Errorf("protocol.validation: %v holds out all %d training images of client %d; every client must keep at least one (lower protocol.validation)", f, len(c.Train), c.ID)
		}
		val := &EvalSet{Name: ValidationMetric, Space: c.TrainSpace}
		train := make([]int, 0, len(c.Train)-n)
		trainLabels := make([]int, 0, len(c.Train)-n)
		for k, i := range c.Train {
			if hold[k] {
				val.Images = append(val.Images, len(test))
				val.Labels = append(val.Labels, c.Labels[k])
				test = append(test, t.Train[i])
				continue
			}
			train = append(train, i)
			trainLabels = append(trainLabels, c.Labels[k])
		}
		c.Train, c.Labels = train, trainLabels
		c.Evals = append(slices.Clip(c.Evals), val)
	}
	t.Test = test
	t.Metrics = append(slices.Clip(t.Metrics), ValidationMetric)
	return nil
}

// KeepValidationOnly drops every evaluation set but the clients' validation
// sets (and the global model's sets), so that a run scores, and caches,
// no test image: what tuning runs on. It fails when the task has no
// validation sets (protocol.validation 0).
func (t *Task) KeepValidationOnly() error {
	if !slices.Contains(t.Metrics, ValidationMetric) {
		return fmt.Errorf("protocol.validation is 0: no validation images to score (set it in (0, 1))")
	}
	for ci := range t.Clients {
		c := &t.Clients[ci]
		c.Evals = slices.DeleteFunc(slices.Clone(c.Evals), func(e *EvalSet) bool { return e.Name != ValidationMetric })
	}
	t.GlobalEvals = nil
	t.Metrics = []string{ValidationMetric}
	t.ValidationOnly = true
	return nil
}
