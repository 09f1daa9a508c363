package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"
)

// MinSteps is the fewest timed repetitions a figure is the median of.
const MinSteps = 10

// Timing summarises repeated measurements of one step: its median and the
// spread around it, in seconds per step.
type Timing struct {
	Steps  int     `json:"steps"`
	Median float64 `json:"median_s"`
	Min    float64 `json:"min_s"`
	Max    float64 `json:"max_s"`
	// Spread is the interquartile range over the median (0.05 = the middle
	// half of the steps lie within 5% of the median's size).
	Spread float64 `json:"spread"`
}

// PerS is the rate of n items per step at the median step time.
func (t Timing) PerS(n int) float64 {
	if t.Median <= 0 {
		return 0
	}
	return float64(n) / t.Median
}

// Measure runs f warmup times untimed (buffers grow, primitives are made),
// then steps times, timing each call, and summarises the step times. It
// stops with ctx's error when ctx is cancelled.
func Measure(ctx context.Context, warmup, steps int, f func(i int) error) (Timing, error) {
	for i := 0; i < warmup; i++ {
		if err := ctx.Err(); err != nil {
			return Timing{}, err
		}
		if err := f(-1 - i); err != nil {
			return Timing{}, err
		}
	}
	times := make([]float64, 0, steps)
	for i := 0; i < steps; i++ {
		if err := ctx.Err(); err != nil {
			return Timing{}, err
		}
		t0 := time.Now()
		if err := f(i); err != nil {
			return Timing{}, err
		}
		times = append(times, time.Since(t0).Seconds())
	}
	return summarise(times), nil
}

// summarise computes the median, extremes and interquartile spread.
func summarise(times []float64) Timing {
	n := len(times)
	if n == 0 {
		return Timing{}
	}
	s := slices.Sorted(slices.Values(times))
	q := func(p float64) float64 { // linear interpolation between order statistics
		x := p * float64(n-1)
		i := int(x)
		if i+1 >= n {
			return s[n-1]
		}
		return s[i] + (x-float64(i))*(s[i+1]-s[i])
	}
	t := Timing{Steps: n, Median: q(0.5), Min: s[0], Max: s[n-1]}
	if t.Median > 0 {
		t.Spread = (q(0.75) - q(0.25)) / t.Median
	}
	return t
}

// Reference is the JSON a reference harness prints for the same benchmark
// (for example the authors' PyTorch code at the same settings on the same
// machine): images per second for a training step and an evaluation batch,
// and its peak resident memory; Config, optional, names the configuration
// it ran with (framework build, BLAS, threads).
type Reference struct {
	TrainImagesPerS float64 `json:"train_images_per_s"`
	EvalImagesPerS  float64 `json:"eval_images_per_s"`
	PeakRSSMiB      float64 `json:"peak_rss_mib"`
	Config          string  `json:"config,omitempty"`
	// The setting the reference was timed at, when its harness records it
	// (reference/*/*_ref.py do): checked against the benchmark's.
	Method  string `json:"method,omitempty"`
	Batch   int    `json:"batch,omitempty"`
	Classes int    `json:"classes,omitempty"`
	Image   int    `json:"image,omitempty"`
	path    string
}

// Check reports an error naming the file and the key when the reference
// was timed at another setting than method, batch, classes and image
// (keys the reference does not record are not checked).
func (r *Reference) Check(method string, batch, classes, image int) error {
	bad := func(key string, got, want any) error {
		return fmt.Errorf("bench: reference %s: %s is %v, the benchmark's is %v: time the reference at the same setting", r.path, key, got, want)
	}
	switch {
	case r.Method != "" && r.Method != method:
		return bad("method", r.Method, method)
	case r.Batch > 0 && r.Batch != batch:
		return bad("batch", r.Batch, batch)
	case r.Classes > 0 && r.Classes != classes:
		return bad("classes", r.Classes, classes)
	case r.Image > 0 && r.Image != image:
		return bad("image", r.Image, image)
	}
	return nil
}

// Label is what is printed beside a ratio to this reference: the
// reference's rate and, when known, its configuration.
func (r *Reference) Label(rate float64) string {
	if r.Config == "" {
		return fmt.Sprintf("ref %.2f", rate)
	}
	return fmt.Sprintf("ref %.2f; %s", rate, r.Config)
}

// LoadReference reads a Reference from a JSON file; the two rates must be
// positive.
func LoadReference(path string) (*Reference, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: reference: %w", err)
	}
	var r Reference
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bench: reference %s: %w", path, err)
	}
	if !(r.TrainImagesPerS > 0) {
		return nil, fmt.Errorf("bench: reference %s: train_images_per_s = %v, want a positive rate", path, r.TrainImagesPerS)
	}
	if !(r.EvalImagesPerS > 0) {
		return nil, fmt.Errorf("bench: reference %s: eval_images_per_s = %v, want a positive rate", path, r.EvalImagesPerS)
	}
	if r.PeakRSSMiB < 0 {
		return nil, fmt.Errorf("bench: reference %s: peak_rss_mib = %v, want ≥ 0", path, r.PeakRSSMiB)
	}
	r.path = path
	return &r, nil
}
