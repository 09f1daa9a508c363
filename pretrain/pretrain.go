package pretrain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"
)

// Files written into the output folder.
const (
	// ModelFile is the pretrained model, OpenAI naming (checkpoint.Load).
	ModelFile = "model.safetensors"
	// ReportFile is the Result as JSON.
	ReportFile = "pretrain.json"
)

// Result describes a finished pretraining run; it is also written to
// ReportFile.
type Result struct {
	Options Options `json:"options"`
	// Command is the command line that reproduces the run.
	Command string      `json:"command"`
	Config  clip.Config `json:"config"`
	// Params is the parameter count; ModelBytes the size of ModelFile.
	Params     int64 `json:"params"`
	ModelBytes int64 `json:"model_bytes"`
	VocabSize  int   `json:"vocab_size"`
	Steps      int   `json:"steps"`
	// WallSeconds is the training time, summed over resumed runs.
	WallSeconds float64 `json:"wall_seconds"`
	// FinalLoss is the mean loss of the last tenth of the steps.
	FinalLoss  float64 `json:"final_loss"`
	LogitScale float64 `json:"logit_scale"`
	// FashionMNIST reports whether Fashion-MNIST images were mixed in.
	FashionMNIST bool    `json:"fashion_mnist"`
	Metrics      Metrics `json:"metrics"`
	History      []Point `json:"history"`
}

// historyEvery is the step interval of Result.History.
const historyEvery = 10

// Run pretrains a CLIP model as opts says and writes the model, its
// vocabulary (bpe_simple_vocab_16e6.txt.gz and vocab.json + merges.txt) and
// ReportFile into opts.OutDir. Progress goes to out (a live bar on a
// terminal, plain lines otherwise, nothing when out is nil). When ctx is
// cancelled the training state is saved (see Options.Resume) and ctx's
// error returned.
func Run(ctx context.Context, opts Options, out io.Writer) (*Result, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := opts.checkMemory(memlimit.AvailableMiB()); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	if err := opts.checkOutDir(); err != nil {
		return nil, err
	}
	w, err := world.New(opts.WorldConfig())
	if err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	statePath := filepath.Join(opts.OutDir, StateFile)
	resume := opts.Resume && fileExists(statePath)
	tok, err := vocabulary(opts, w, resume)
	if err != nil {
		return nil, err
	}
	weights := clip.Random(opts.ModelConfig(tok.VocabSize()), opts.Seed)
	tr := newTrainer(opts, weights)
	var prevWall float64
	var history []Point
	if resume {
		if prevWall, history, err = tr.loadState(statePath); err != nil {
			return nil, err
		}
		slog.Info("pretrain: resuming", "state", statePath, "step", tr.step)
	}
	var fashion *fashionSet
	if opts.FashionFraction > 0 {
		if fashion, err = loadFashion(opts.FashionDir); err != nil {
			return nil, err
		}
	}
	if fashion != nil {
		slog.Info("pretrain: mixing in Fashion-MNIST", "images", len(fashion.items), "fraction", opts.FashionFraction)
	}
	wall := func() float64 { return prevWall + time.Since(start).Seconds() }
	if err := train(ctx, tr, w, tok, fashion, &history, wall, out); err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			if serr := tr.saveState(statePath, wall(), history); serr != nil {
				return nil, errors.Join(err, serr)
			}
			slog.Info("pretrain: interrupted; state saved, continue with --resume", "state", statePath, "step", tr.step)
		}
		return nil, err
	}
	if err := tr.saveState(statePath, wall(), history); err != nil {
		return nil, err
	}
	return finish(ctx, tr, w, tok, fashion != nil, history, wall())
}

// vocabulary learns and writes the vocabulary, or reads the one a resumed
// run wrote.
func vocabulary(opts Options, w *world.World, resume bool) (*tokenizer.Tokenizer, error) {
	path := filepath.Join(opts.OutDir, tokenizer.SimpleVocabGz)
	if resume && fileExists(path) {
		return tokenizer.Load(path)
	}
	tok, err := learnVocab(w, opts.VocabCaptions, opts.Merges)
	if err != nil {
		return nil, err
	}
	if err := tok.WriteBPEGz(path); err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	if err := tok.WriteHF(opts.OutDir); err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	return tok, nil
}

// train runs the remaining steps, checkpointing every CheckpointEvery.
func train(ctx context.Context, tr *trainer, w *world.World, tok *tokenizer.Tokenizer, fashion *fashionSet, history *[]Point, wall func() float64, out io.Writer) error {
	o := tr.opts
	if tr.step >= o.Steps {
		return nil
	}
	s := &sampler{w: w, tok: tok, fashion: fashion, frac: o.FashionFraction, seed: o.Seed,
		B: o.Batch, S: o.ImageSize, C: o.ContextLength, lut: newPixelLUT(), clipTf: preprocessTransform(o.ImageSize)}
	workers := o.Workers
	if workers == 0 {
		workers = 2
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := s.stream(sctx, tr.step, o.Steps, workers)
	bar := progress.New(out, o.Steps-tr.step, "step", "img")
	defer bar.Finish()
	ema := math.NaN()
	for tr.step < o.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		var b *batch
		select {
		case b = <-batches:
		case <-ctx.Done():
			return ctx.Err()
		}
		if b == nil {
			return ctx.Err()
		}
		if b.err != nil {
			return b.err
		}
		if b.step != tr.step {
			return fmt.Errorf("pretrain: internal error: batch of step %d at step %d", b.step, tr.step)
		}
		r, err := tr.trainStep(b)
		if err != nil {
			return err
		}
		if math.IsNaN(r.loss) || math.IsInf(r.loss, 0) {
			return fmt.Errorf("pretrain: step %d: loss is %v (lower --lr)", b.step, r.loss)
		}
		if math.IsNaN(ema) {
			ema = r.loss
		}
		ema = 0.95*ema + 0.05*r.loss
		if tr.step%historyEvery == 0 || tr.step == o.Steps {
			*history = append(*history, Point{Step: tr.step, Loss: r.loss, BatchAcc: r.batchAcc, LR: r.lr, Scale: math.Exp(float64(tr.ls[0]))})
		}
		bar.Describe(fmt.Sprintf("step (loss %.3f, scale %.1f)", ema, math.Exp(float64(tr.ls[0]))))
		bar.AddItems(1, o.Batch)
		if o.CheckpointEvery > 0 && tr.step%o.CheckpointEvery == 0 && tr.step < o.Steps {
			if err := tr.saveState(filepath.Join(o.OutDir, StateFile), wall(), *history); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish writes the model, evaluates it and writes the report.
func finish(ctx context.Context, tr *trainer, w *world.World, tok *tokenizer.Tokenizer, fashion bool, history []Point, wall float64) (*Result, error) {
	o := tr.opts
	modelPath := filepath.Join(o.OutDir, ModelFile)
	var sopts []safetensors.Option
	if o.DType == "bf16" {
		sopts = append(sopts, safetensors.WithFloatType(safetensors.BF16))
	}
	if err := checkpoint.Save(modelPath, tr.m.W, checkpoint.OpenAI, sopts...); err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	// Evaluate the model as it is stored (bf16 rounding included).
	stored, _, err := checkpoint.Load(modelPath)
	if err != nil {
		return nil, fmt.Errorf("pretrain: reading back %s: %w", modelPath, err)
	}
	res := &Result{
		Options: o, Command: o.Command(), Config: stored.Config, Params: checkpoint.ParamCount(stored.Config),
		VocabSize: tok.VocabSize(), Steps: tr.step, WallSeconds: wall,
		LogitScale: math.Exp(float64(stored.LogitScale)), FashionMNIST: fashion, History: history,
	}
	if info, err := os.Stat(modelPath); err == nil {
		res.ModelBytes = info.Size()
	}
	tail := max(len(history)/10, 1)
	for _, p := range history[max(len(history)-tail, 0):] {
		res.FinalLoss += p.Loss / float64(min(tail, len(history)))
	}
	if o.EvalPerClass > 0 {
		if res.Metrics, err = Evaluate(ctx, clip.New(stored), tok, w, o.EvalPerClass); err != nil {
			return nil, err
		}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("pretrain: report: %w", err)
	}
	rp := filepath.Join(o.OutDir, ReportFile)
	if err := atomicfile.Write(rp, func(wr io.Writer) error {
		_, err := wr.Write(append(b, '\n'))
		return err
	}); err != nil {
		return nil, fmt.Errorf("pretrain: report %s: %w", rp, err)
	}
	return res, nil
}

func fileExists(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.Mode().IsRegular()
}
