package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/pfedmma/pfedmma/gemm"
)

// TrainCommand is `pfedmma bench train` as its flags give it.
type TrainCommand struct {
	Batch, Steps, Classes, Start, Dim int
	// Precision (fp32, bf16, auto) and Reference (a JSON file of the
	// authors' figures, or empty) as given.
	Precision, Reference string
	// Method, when set, benchmarks this registered method (Method) instead
	// of the pFedMMA engine (Train); Vocab and Uncached are its options.
	Method, Vocab string
	Uncached      bool
	// NoSplit caches the prefix before the adapted block (Train).
	NoSplit bool
	JSON    bool
	Log     func(string)
}

// RunTrain runs c and prints its result to w as text or JSON.
func RunTrain(ctx context.Context, c TrainCommand, w io.Writer) error {
	if err := CheckTrainSizes(c.Batch, c.Steps, c.Classes, c.Start, c.Dim); err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	prec, err := gemm.ParsePrecision(c.Precision)
	if err != nil {
		return fmt.Errorf("bench train: --precision: %w", err)
	}
	var ref *Reference
	if c.Reference != "" {
		if ref, err = LoadReference(c.Reference); err != nil {
			return fmt.Errorf("bench train: --reference: %w", err)
		}
	}
	if c.Method != "" {
		r, err := Method(ctx, MethodOptions{Method: c.Method, Batch: c.Batch, Classes: c.Classes, Steps: c.Steps,
			Precision: prec, Reference: ref, Log: c.Log, Uncached: c.Uncached, Vocab: c.Vocab})
		if err != nil {
			return fmt.Errorf("bench train --method %s: %w", c.Method, err)
		}
		return writeResult(w, c.JSON, r, func() error { return r.WriteText(w, ref) })
	}
	r, err := Train(ctx, TrainOptions{Batch: c.Batch, Steps: c.Steps, Classes: c.Classes, Start: c.Start, Dim: c.Dim,
		Precision: prec, Reference: ref, Log: c.Log, NoSplit: c.NoSplit})
	if err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	return writeResult(w, c.JSON, r, func() error { return r.WriteText(w, ref) })
}

// writeResult prints r to w as indented JSON, or as text by text.
func writeResult(w io.Writer, asJSON bool, r any, text func() error) error {
	if !asJSON {
		return text()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ExperimentCommand is `pfedmma bench experiment` as its flags give it: a
// few measured rounds (Options), or with PaperScale.Presets the projection
// of paper presets, or with Merge the join of earlier projections.
type ExperimentCommand struct {
	Options    ExperimentOptions
	PaperScale PaperScaleOptions
	// Reference is a JSON file of the authors' figures (or empty); Out the
	// folder of the projection's files (or empty); CacheDType the cache's
	// storage, bfloat16 or float32.
	Reference, Out, CacheDType string
	Merge                      []string
	Reproject, JSON            bool
	Log                        func(string)
}

// RunExperiment runs c and prints its result to w as text or JSON.
func RunExperiment(ctx context.Context, c ExperimentCommand, w io.Writer) error {
	if c.Options.Precision != "fp32" && c.Options.Precision != "bf16" {
		return fmt.Errorf("bench experiment: --precision %q: want fp32 or bf16", c.Options.Precision)
	}
	switch {
	case len(c.Merge) > 0:
		return c.mergePaperScale(w)
	case len(c.PaperScale.Presets) > 0:
		return c.paperScale(ctx, w)
	}
	if c.Reference != "" {
		r, err := LoadReference(c.Reference)
		if err != nil {
			return err
		}
		c.Options.Reference = r
	}
	c.Options.Log = c.Log
	r, err := Experiment(ctx, c.Options)
	if err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	return writeResult(w, c.JSON, r, func() error { return r.WriteText(w) })
}

// mergePaperScale joins the saved projections, with Reproject projected
// again.
func (c ExperimentCommand) mergePaperScale(w io.Writer) error {
	r, err := MergePaperScale(c.Merge, !c.Reproject)
	if err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	if c.Reproject {
		if c.PaperScale.CacheBF16, err = ParseCacheDType(c.CacheDType); err != nil {
			return fmt.Errorf("bench experiment: %w", err)
		}
		c.PaperScale.Log = c.Log
		if err := Reproject(r, c.PaperScale); err != nil {
			return fmt.Errorf("bench experiment: --reproject: %w", err)
		}
	}
	return c.writePaperScale(w, r)
}

// paperScale measures the rounds and projects the presets.
func (c ExperimentCommand) paperScale(ctx context.Context, w io.Writer) error {
	var err error
	if c.PaperScale.CacheBF16, err = ParseCacheDType(c.CacheDType); err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	c.PaperScale.Log = c.Log
	r, err := PaperScale(ctx, c.PaperScale)
	if err != nil {
		return fmt.Errorf("bench experiment: %w", err)
	}
	return c.writePaperScale(w, r)
}

// writePaperScale writes r's files into Out (when set) and prints its
// table or JSON.
func (c ExperimentCommand) writePaperScale(w io.Writer, r *PaperScaleResult) error {
	if c.Out != "" {
		if err := r.WriteFiles(c.Out); err != nil {
			return fmt.Errorf("bench experiment: %w", err)
		}
	}
	return writeResult(w, c.JSON, r, func() error { return r.WriteTable(w) })
}
