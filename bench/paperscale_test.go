package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"

	_ "github.com/pfedmma/pfedmma/methods/all" // the methods
)

// smallModel writes a tiny random CLIP: the projection reads the model
// file only through the configuration's checks (its record size is
// ViT-B/16's).
func smallModel(t *testing.T) string {
	t.Helper()
	cfg := clip.Config{EmbedDim: 16,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 16, Width: 32, Layers: 12, Heads: 1, MLPWidth: 64},
		Text:   clip.TextConfig{ContextLength: 16, VocabSize: 600, Width: 32, Layers: 12, Heads: 1, MLPWidth: 64}}
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := checkpoint.Save(p, clip.Random(cfg, 1), checkpoint.OpenAI); err != nil {
		t.Fatal(err)
	}
	return p
}

func preset(t *testing.T, name, ds string) *config.Experiment {
	t.Helper()
	e, err := config.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	if ds != "" {
		e.Dataset.Name = ds
	}
	return e
}

// TestProjectBaseToNovel: the projection of paper-base2novel on
// Caltech101's real counts counts the images the recipe pushes (50 base
// classes × 16 shots × 2 epochs per round, evaluation after rounds 5, 10,
// … 50), sizes the cache of the test images (training is augmented online:
// no training records) and applies the spill's measured cost only when the
// cache exceeds the RAM budget.
func TestProjectBaseToNovel(t *testing.T) {
	model := smallModel(t)
	e := preset(t, "paper-base2novel", "")
	real := PaperDatasets["caltech101"]
	m := &MeasuredRun{TrainSecondsPerImg: 0.5, EvalSecondsPerImg: 0.1, FillSecondsPerRec: 0.2, PeakRSSMiB: 3000, CachedRecords: 100, SpillFactor: 1.5}
	o := PaperScaleOptions{MemoryBudgetMiB: 8192, CacheBF16: true}
	p, err := projectPreset(e, real, model, m, o, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.TrainImagesRound0 != 2*50*16 || p.TrainImagesPerRound != 2*50*16 || p.PerRound != 10 {
		t.Errorf("training images %d / %d per round, %d clients per round; want 1600 / 1600, 10", p.TrainImagesRound0, p.TrainImagesPerRound, p.PerRound)
	}
	if p.Evaluations != 10 || p.Seeds != 3 || p.Rounds != 50 {
		t.Errorf("%d evaluations, %d seeds, %d rounds; want 10, 3, 50", p.Evaluations, p.Seeds, p.Rounds)
	}
	// every client evaluates at least its local and the novel test images
	if p.EvalImagesPerEval < 10*real.Test/2 {
		t.Errorf("%d evaluation images per evaluation, want ≥ %d", p.EvalImagesPerEval, 10*real.Test/2)
	}
	rec := float64(197 * 768 * 2 * 2) // bfloat16 split records: block 10's output and adapter input
	if p.CachedRecords != int64(real.Test) || math.Abs(p.CacheGiB-float64(real.Test)*rec/(1<<30)) > 1e-9 || p.Spilled || p.SpillGiB != 0 {
		t.Errorf("cache %d records, %.3f GiB, spilled %v (%.3f GiB)", p.CachedRecords, p.CacheGiB, p.Spilled, p.SpillGiB)
	}
	wantSeed := float64(real.Test)*0.2 + 1600*0.5 + 49*1600*0.5 + 10*float64(p.EvalImagesPerEval)*0.1
	if math.Abs(p.SeedSeconds-wantSeed) > 1e-6*wantSeed || math.Abs(p.Hours-3*wantSeed/3600) > 1e-9*p.Hours {
		t.Errorf("seconds per seed %.1f, hours %.3f; want %.1f, %.3f", p.SeedSeconds, p.Hours, wantSeed, 3*wantSeed/3600)
	}
	wantPeak := (3000*float64(1<<20) - 100*rec + float64(real.Test)*rec) / (1 << 30)
	if math.Abs(p.PeakGiB-wantPeak) > 1e-9 {
		t.Errorf("peak %.3f GiB, want %.3f", p.PeakGiB, wantPeak)
	}

	// a budget of 100 MiB: 50 MiB for the test store, the rest spilled and
	// every round slower by the measured factor
	o.MemoryBudgetMiB = 100
	q, err := projectPreset(e, real, model, m, o, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Spilled || math.Abs(q.CacheRAMGiB-50.0/1024) > 1e-9 || math.Abs(q.SpillGiB-(q.CacheGiB-50.0/1024)) > 1e-9 {
		t.Errorf("budget 100 MiB: spilled %v, RAM %.4f GiB, disk %.4f GiB of %.4f", q.Spilled, q.CacheRAMGiB, q.SpillGiB, q.CacheGiB)
	}
	if math.Abs(q.RoundSeconds-1.5*p.RoundSeconds) > 1e-9*q.RoundSeconds || q.PeakGiB >= p.PeakGiB {
		t.Errorf("spilled round %.1f s (in RAM %.1f s), peak %.2f GiB (in RAM %.2f)", q.RoundSeconds, p.RoundSeconds, q.PeakGiB, p.PeakGiB)
	}

	// more rounds and more shots cost more
	r, err := projectPreset(e, real, model, m, o, 0, 4, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rounds != 100 || r.TrainImagesPerRound != 2*50*4 || r.Evaluations != 20 {
		t.Errorf("shots 4, rounds 100: %d rounds, %d training images per round, %d evaluations", r.Rounds, r.TrainImagesPerRound, r.Evaluations)
	}
}

// TestProjectCIFAR100: paper-cifar on CIFAR-100 (100 clients, 10% per
// round, the full training set, no augmentation) caches all 60,000 images;
// at bf16 that is ~17 GiB, 10 of it spilled under an 8 GiB budget.
func TestProjectCIFAR100(t *testing.T) {
	model := smallModel(t)
	e := preset(t, "paper-cifar", "cifar100")
	m := &MeasuredRun{TrainSecondsPerImg: 1, EvalSecondsPerImg: 0.1, FillSecondsPerRec: 0.1, PeakRSSMiB: 2000, SpillFactor: 1.2}
	p, err := projectPreset(e, PaperDatasets["cifar100"], model, m, PaperScaleOptions{MemoryBudgetMiB: 8192, CacheBF16: true}, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Clients != 100 || p.PerRound != 10 || p.TrainImagesRound0 != 50000 || p.TrainImagesPerRound != 5000 {
		t.Errorf("%d clients (%d per round), training images %d then %d; want 100 (10), 50000 then 5000", p.Clients, p.PerRound, p.TrainImagesRound0, p.TrainImagesPerRound)
	}
	// the budget is split between the training and the test store: 4 GiB
	// of training records, the 10,000 test records whole
	if p.CachedRecords != 60000 || !p.Spilled || math.Abs(p.CacheRAMGiB-(4+10000*197*768*2.0/(1<<30))) > 1e-9 {
		t.Errorf("cache %d records (%.1f GiB, %.1f in RAM), spilled %v", p.CachedRecords, p.CacheGiB, p.CacheRAMGiB, p.Spilled)
	}
	if p.Evaluations != 10 || p.EvalImagesPerEval != 10000 {
		t.Errorf("%d evaluations of %d images; want 10 of 10000 (every client its own test images)", p.Evaluations, p.EvalImagesPerEval)
	}
}

// TestProjectFeatureCache: paper-pfedmoap on CIFAR-100 caches pFedMoAP's
// image features, one [E] = 512 record per image (60,000 × 512 bfloat16:
// 59 MiB, nothing spilled), not a ViT-B/16 prefix; training pushes 5 local
// epochs of the sampled tenth.
func TestProjectFeatureCache(t *testing.T) {
	model := smallModel(t)
	e := preset(t, "paper-pfedmoap", "cifar100")
	m := &MeasuredRun{TrainSecondsPerImg: 0.04, EvalSecondsPerImg: 0.1, FillSecondsPerRec: 0.2, PeakRSSMiB: 2000, CachedRecords: 800, SpillFactor: 1.1}
	p, err := projectPreset(e, PaperDatasets["cifar100"], model, m, PaperScaleOptions{MemoryBudgetMiB: 8192, CacheBF16: true}, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := 512 * 2.0
	if p.CachedRecords != 60000 || math.Abs(p.CacheGiB-60000*rec/(1<<30)) > 1e-9 || p.Spilled || p.SpillGiB != 0 {
		t.Errorf("cache %d records, %.4f GiB (want %.4f), spilled %v (%.3f GiB)", p.CachedRecords, p.CacheGiB, 60000*rec/(1<<30), p.Spilled, p.SpillGiB)
	}
	wantPeak := (2000*float64(1<<20) - 800*rec + 60000*rec) / (1 << 30)
	if math.Abs(p.PeakGiB-wantPeak) > 1e-9 {
		t.Errorf("peak %.4f GiB, want %.4f", p.PeakGiB, wantPeak)
	}
	if p.TrainImagesPerRound != 5*5000 || p.Rounds != 120 {
		t.Errorf("%d training images per round over %d rounds; want 25000 over 120", p.TrainImagesPerRound, p.Rounds)
	}
}

// TestPaperScaleFiles: the table names every preset and the measured
// rounds; the plot is a PNG.
func TestPaperScaleFiles(t *testing.T) {
	r := &PaperScaleResult{Backend: "openblas", Kernel: "k", Threads: 2, CPUs: 2, MemoryBudgetMiB: 8192, CacheDType: "bfloat16",
		Presets: []PresetScale{{Preset: "paper-base2novel", Dataset: "caltech101", Method: "pfedmma",
			Measured:   MeasuredRun{Rounds: []RoundTiming{{Seconds: 12.5, Fit: 10, Eval: 2.5}}, SpillFactor: 1.25, SecondsPerRound: 8, SpilledSecondsPerRound: 10},
			Projection: Projection{Hours: 7.25},
			Scaling:    []ScalePoint{{"clients", 5, 1, 2}, {"clients", 10, 2, 2}, {"shots", 1, 1, 2}, {"shots", 16, 3, 2}, {"rounds", 10, 1, 2}, {"rounds", 50, 4, 2}}}}}
	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "paperscale.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"paper-base2novel (caltech101, pfedmma)", "**7.2**", "12.5 (10.0, 2.5)", "10.0 s vs 8.0 s (×1.25)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	png, err := os.ReadFile(filepath.Join(dir, "paperscale.png"))
	if err != nil || len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Errorf("plot: %d bytes, %v", len(png), err)
	}
	// --merge joins two runs' presets and refuses another budget
	m, err := MergePaperScale([]string{filepath.Join(dir, "paperscale.json"), filepath.Join(dir, "paperscale.json")}, true)
	if err != nil || len(m.Presets) != 2 || m.Presets[1].Projection.Hours != 7.25 {
		t.Fatalf("merge: %v, %+v", err, m)
	}
	r.MemoryBudgetMiB = 100
	other := filepath.Join(t.TempDir(), "other")
	if err := r.WriteFiles(other); err != nil {
		t.Fatal(err)
	}
	if _, err := MergePaperScale([]string{filepath.Join(dir, "paperscale.json"), filepath.Join(other, "paperscale.json")}, true); err == nil || !strings.Contains(err.Error(), "memory_budget_mib") {
		t.Errorf("merging another budget: %v", err)
	}
}

// TestReproject: a saved measurement projected again under another budget
// gives the projection of its rates (the same as projecting directly) and
// the scaling points.
func TestReproject(t *testing.T) {
	m := MeasuredRun{TrainSecondsPerImg: 1, EvalSecondsPerImg: 0.1, FillSecondsPerRec: 0.1, PeakRSSMiB: 2000, SpillFactor: 1.2}
	r := &PaperScaleResult{MemoryBudgetMiB: 8192, CacheDType: "bfloat16",
		Presets: []PresetScale{{Preset: "paper-cifar", Dataset: "cifar100", Method: "pfedmma", Measured: m}}}
	o := PaperScaleOptions{MemoryBudgetMiB: 2048, CacheBF16: true}
	if err := Reproject(r, o); err != nil {
		t.Fatal(err)
	}
	want, err := projectPreset(preset(t, "paper-cifar", "cifar100"), PaperDatasets["cifar100"], smallModel(t), &m, o, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := r.Presets[0].Projection
	if r.MemoryBudgetMiB != 2048 || got.Hours != want.Hours || got.CacheRAMGiB != 2 || len(r.Presets[0].Scaling) < 12 {
		t.Errorf("reprojected: budget %d, %.2f h (want %.2f), cache RAM %.2f GiB (want 2), %d scaling points", r.MemoryBudgetMiB, got.Hours, want.Hours, got.CacheRAMGiB, len(r.Presets[0].Scaling))
	}
}

// tinyModelDir writes a tiny random 12-block CLIP (as paper-base2novel
// adapts blocks 10-12) with a vocabulary learnt from the world's class
// prompts into dir/model and returns that folder.
func tinyModelDir(t *testing.T, dir string) string {
	t.Helper()
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var corpus []string
	for _, c := range w.Classes() {
		corpus = append(corpus, "a photo of a "+c.Name()+".")
	}
	tok := tokenizer.FromMerges(tokenizer.Learn(corpus, 200))
	mdir := filepath.Join(dir, "model")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := tok.WriteBPEGz(filepath.Join(mdir, tokenizer.SimpleVocabGz)); err != nil {
		t.Fatal(err)
	}
	cfg := clip.Config{EmbedDim: 16,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 16, Width: 32, Layers: 12, Heads: 1, MLPWidth: 64},
		Text:   clip.TextConfig{ContextLength: 77, VocabSize: tok.VocabSize(), Width: 32, Layers: 12, Heads: 1, MLPWidth: 64}}
	if err := checkpoint.Save(filepath.Join(mdir, "model.safetensors"), clip.Random(cfg, 1), checkpoint.OpenAI); err != nil {
		t.Fatal(err)
	}
	return mdir
}

// TestMeasurePresetSmall runs the measured rounds of paper-base2novel end
// to end on a tiny random CLIP (12 blocks, as the preset adapts blocks
// 10-12) and 4 generated classes, in RAM and spilled: rates from the
// rounds after the first, the spilled rerun timed.
func TestMeasurePresetSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: renders images and runs two small experiments")
	}
	dir := t.TempDir()
	mdir := tinyModelDir(t, dir)
	e := preset(t, "paper-base2novel", "")
	o := PaperScaleOptions{RoundsMeasured: 2, Scale: 1.0 / 16, MemoryBudgetMiB: 100, CacheBF16: true, SpillCompare: true}
	m, err := measurePreset(context.Background(), o, e, "pfedmma", DatasetCounts{Classes: 4, Train: 64, Test: 16}, mdir, filepath.Join(dir, "p"), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	// 1 client (two base classes each), 2 base classes × 1 shot × 2 epochs
	if m.Clients != 1 || m.TrainImages != 4 || m.EvalImages == 0 || m.CachedRecords == 0 {
		t.Errorf("measured %d clients, %d training and %d evaluation images, %d records", m.Clients, m.TrainImages, m.EvalImages, m.CachedRecords)
	}
	if len(m.Rounds) != 2 || len(m.SpilledRounds) != 2 || !(m.TrainSecondsPerImg > 0) || !(m.EvalSecondsPerImg > 0) || !(m.SpillFactor > 0) || !(m.PeakRSSMiB > 0) {
		t.Errorf("%+v", m)
	}
}

// TestMeasurePresetPool: a method whose settings need a pool of clients
// (pFedMoAP's num_experts, 3 here) is measured with that many clients, not
// the 2 asked for, and the run goes through.
func TestMeasurePresetPool(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: renders images and runs a small experiment")
	}
	dir := t.TempDir()
	mdir := tinyModelDir(t, dir)
	e := preset(t, "paper-pfedmoap", "")
	for _, kv := range [][2]string{{"pfedmoap.num_experts", "3"}, {"pfedmoap.gate_width", "16"}} { // the tiny model's 16 features
		if err := e.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	var log []string
	o := PaperScaleOptions{RoundsMeasured: 2, Scale: 0.25, ClientsMeasured: 2, MemoryBudgetMiB: 100, CacheBF16: true}
	m, err := measurePreset(context.Background(), o, e, "pfedmoap", DatasetCounts{Classes: 6, Train: 96, Test: 24}, mdir, filepath.Join(dir, "p"), func(s string) { log = append(log, s) })
	if err != nil {
		t.Fatal(err)
	}
	if m.Clients != 3 || m.TrainImages == 0 || !(m.TrainSecondsPerImg > 0) {
		t.Errorf("measured %d clients (want 3, pfedmoap.num_experts), %d training images, %g s each", m.Clients, m.TrainImages, m.TrainSecondsPerImg)
	}
	if !slices.ContainsFunc(log, func(s string) bool { return strings.Contains(s, "measuring 3 clients, not 2") }) {
		t.Errorf("the log does not say why 3 clients were measured:\n%s", strings.Join(log, "\n"))
	}
}
