// Package predict uses a CLIP model outside training: Predict classifies
// images with the model one site ended a finished run with (the run
// folder's run.json and the site's file), Classify is zero-shot CLIP,
// Embed prints image and text features, and Preprocess writes images as
// the pixel tensors the model reads. The commands predict, zeroshot, embed
// and preprocess run them.
package predict

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"gopkg.in/yaml.v3"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/runfiles"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// PredictConfig is one `pfedmma predict` call: classify Images with the
// model site Client ended the run in folder Run with.
type PredictConfig struct {
	// Run is the output folder of a finished run.
	Run string
	// Method is one of the run's methods (default: its first trained one).
	Method string
	Client int
	// Space is a label space of the run, "all" (every class of the
	// dataset), or empty: the one the site trained over.
	Space string
	// Top is the number of classes kept per image (≥ 1).
	Top    int
	Images []string
	// Model, when set, replaces the model run.json names (a run folder
	// moved to another machine); it must be the same model (run.json's
	// model_sha256).
	Model string
	// DefaultModel, when set, returns the embedded model's folder: a run
	// trained on it finds it there on any machine.
	DefaultModel func() (string, error)
}

// Prediction is what Predict found: each image's most likely classes.
type Prediction struct {
	Method string
	Client int
	// Space names the label space classified over; Classes is its size.
	Space   string
	Classes int
	Images  []ImagePrediction
}

// ImagePrediction is one image's classes, most likely first.
type ImagePrediction struct {
	Image string
	Top   []Ranked
}

// Ranked is a class and its probability.
type Ranked struct {
	Class string
	Prob  float64
}

// Predict classifies c.Images with one site's personalised model from a
// finished run: run.json names the model, the prompt template and the
// label spaces; the site's trained tensors come from the run's per-site
// files (the folder run.json names: sites/<method>/, or adapters/ in a
// pFedMMA run written before that layout).
func Predict(ctx context.Context, c PredictConfig) (*Prediction, error) {
	if c.Run == "" {
		return nil, errors.New("no --run DIR given (the output folder of a finished pfedmma run)")
	}
	if len(c.Images) == 0 {
		return nil, errors.New("no --image given")
	}
	if c.Top < 1 {
		return nil, fmt.Errorf("--top %d: want at least 1", c.Top)
	}
	for _, img := range c.Images {
		if err := inputfile.Check(img); err != nil {
			return nil, fmt.Errorf("--image %w", err)
		}
	}
	info, err := runfiles.ReadInfo(c.Run)
	if err != nil {
		return nil, err
	}
	meth, err := predictMethod(info, c)
	if err != nil {
		return nil, err
	}
	name := meth.Info().Name
	classes, spaceName, err := predictSpace(info, c)
	if err != nil {
		return nil, err
	}
	sec, err := runSection(info, c.Run, meth)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(c.Run, info.Sites[name], runfiles.SiteFile(c.Client))
	saved, err := readSiteFile(path, methods.Trains(meth))
	if err != nil {
		return nil, fmt.Errorf("site %d of %s: %w%s", c.Client, name, err, siteFileHint(info, c.Run, name, c.Client, err))
	}
	model, vocab, err := predictModel(info, c)
	if err != nil {
		return nil, err
	}
	m, tok, err := experiment.LoadModel(model, vocab)
	if err != nil {
		return nil, err
	}
	p, err := meth.Predictor(methods.PredictEnv{Model: m, Tok: tok, Template: info.Template}, sec, saved)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for _, ci := range classes {
		names = append(names, info.Classes[ci])
	}
	vals, err := preprocess.CLIPTransform(m.W.Config.Vision.ImageSize).EvalFiles(ctx, c.Images, 0)
	if err != nil {
		return nil, err
	}
	if len(vals) > 0 {
		// one blank image first: an error here comes from the run's
		// files (a site file lacking a tensor), not from the images
		if _, err := p.Logits(make([]float32, len(vals[0])), 1, names); err != nil {
			return nil, fmt.Errorf("site %d of %s (%s): %w", c.Client, name, path, err)
		}
	}
	out := &Prediction{Method: name, Client: c.Client, Space: spaceName, Classes: len(names)}
	for i, v := range vals {
		logits, err := p.Logits(v, 1, names)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Images[i], err)
		}
		top, err := Rank(logits, names, c.Top)
		if err != nil {
			return nil, fmt.Errorf("%s: %w; the run's parameters are damaged", c.Images[i], err)
		}
		out.Images = append(out.Images, ImagePrediction{Image: c.Images[i], Top: top})
	}
	return out, nil
}

// predictMethod returns the method c asks for, or the run's first trained
// method (its first method when none trains).
func predictMethod(info *runfiles.Info, c PredictConfig) (methods.Method, error) {
	name := c.Method
	if name == "" {
		name = info.Methods[0]
		for _, n := range info.Methods {
			if m, err := methods.Get(n); err == nil && methods.Trains(m) {
				name = n
				break
			}
		}
	}
	if !slices.Contains(info.Methods, name) {
		return nil, fmt.Errorf("run %s did not run method %q (it ran %v)", c.Run, name, info.Methods)
	}
	return methods.Get(name)
}

// predictSpace returns the classes (indices into info.Classes) and the name
// of the label space c asks for.
func predictSpace(info *runfiles.Info, c PredictConfig) ([]int, string, error) {
	sp, ok := info.ClientSpace[c.Client]
	if !ok {
		return nil, "", fmt.Errorf("--client %d: run %s has clients 0..%d", c.Client, c.Run, len(info.ClientSpace)-1)
	}
	if c.Space == "" {
		return info.Spaces[sp].Classes, info.Spaces[sp].Name, nil
	}
	if i := slices.IndexFunc(info.Spaces, func(s protocol.Space) bool { return s.Name == c.Space }); i >= 0 {
		return info.Spaces[i].Classes, c.Space, nil
	}
	if c.Space == "all" {
		all := make([]int, len(info.Classes))
		for i := range all {
			all[i] = i
		}
		return all, "all", nil
	}
	var names []string
	for _, s := range info.Spaces {
		names = append(names, s.Name)
	}
	return nil, "", fmt.Errorf("--space %q: run %s has label spaces %v and all", c.Space, c.Run, names)
}

// runSection decodes the method's settings run.json recorded.
func runSection(info *runfiles.Info, dir string, meth methods.Method) (config.Section, error) {
	name := meth.Info().Name
	src, ok := info.Sections[name]
	if !ok || meth.DefaultConfig() == nil {
		return nil, nil
	}
	sec := meth.DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(sec); err != nil && err != io.EOF {
		return nil, fmt.Errorf("%s: field \"sections\": %s: %w", filepath.Join(dir, runfiles.InfoFile), name, err)
	}
	if err := config.CheckSection(name, sec); err != nil {
		return nil, fmt.Errorf("%s: field \"sections\": %w", filepath.Join(dir, runfiles.InfoFile), err)
	}
	return sec, nil
}

// readSiteFile reads a site's saved tensors. A method that trains needs
// them; a frozen one keeps none (an empty set).
func readSiteFile(path string, needed bool) (tensor.Named, error) {
	if _, err := os.Stat(path); err != nil {
		if !needed && errors.Is(err, fs.ErrNotExist) {
			return tensor.Named{}, nil
		}
		return nil, err
	}
	if err := inputfile.Check(path); err != nil {
		return nil, err
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Float32All()
}

// siteFileHint says where a missing site file is: in a served run each
// site keeps it in its state folder; a simulated run writes it only with
// output.save_adapters.
func siteFileHint(info *runfiles.Info, run, method string, client int, err error) string {
	if !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if info.Served {
		return fmt.Sprintf("; this run was coordinated by pfedmma serve, whose sites keep their files: copy %s from the state folder of client %d's site (its --state, or STATE/site-NAME with --clients) into %s",
			filepath.Join(info.Sites[method], runfiles.SiteFile(client)), client, filepath.Join(run, info.Sites[method]))
	}
	return " (was the run made with output.save_adapters?)"
}

// predictModel returns the model and vocabulary to predict with: --model
// when given (checked against run.json's digest), else run.json's model
// (a relative path is inside the run folder), else, when that is not on
// this machine, the embedded model if it is the one the run used.
func predictModel(info *runfiles.Info, c PredictConfig) (model, vocab string, err error) {
	vocab = runfiles.ResolvePath(c.Run, info.Vocab)
	if vocab != "" {
		if _, err := os.Stat(vocab); err != nil {
			vocab = "" // the one beside the model
		}
	}
	if c.Model != "" {
		if err := inputfile.CheckAny(c.Model); err != nil {
			return "", "", fmt.Errorf("--model %w", err)
		}
		if info.ModelSHA256 != "" {
			sum, err := runfiles.ModelDigest(c.Model)
			if err != nil {
				return "", "", fmt.Errorf("--model %s: %w", c.Model, err)
			}
			if sum != info.ModelSHA256 {
				return "", "", fmt.Errorf("--model %s is not the model run %s trained with (its SHA-256 is %s, run.json's model_sha256 %s)", c.Model, c.Run, sum, info.ModelSHA256)
			}
		}
		return c.Model, vocab, nil
	}
	model = runfiles.ResolvePath(c.Run, info.Model)
	if _, err := os.Stat(model); err == nil {
		return model, vocab, nil
	}
	if c.DefaultModel != nil {
		if d, err := c.DefaultModel(); err == nil && isModel(d, info) {
			return d, vocab, nil
		}
	}
	sum := ""
	if info.ModelSHA256 != "" {
		sum = ", SHA-256 " + info.ModelSHA256
	}
	return "", "", fmt.Errorf("run %s: its model %s (field \"model\" of %s) is not on this machine: pass --model with the model the run trained with (%s%s)",
		c.Run, model, runfiles.InfoFile, filepath.Base(model), sum)
}

// isModel says whether the model at path is the one run.json names: by
// digest, or, without one, by the embedded model's folder name (its
// content hash).
func isModel(path string, info *runfiles.Info) bool {
	if info.ModelSHA256 != "" {
		sum, err := runfiles.ModelDigest(path)
		return err == nil && sum == info.ModelSHA256
	}
	return filepath.Base(path) == filepath.Base(info.Model)
}

// Rank returns the top classes of one image's logits over names, most
// likely first, with their softmax probabilities; non-finite scores are an
// error.
func Rank(logits []float32, names []string, top int) ([]Ranked, error) {
	probs := Softmax(logits)
	order := make([]int, len(names))
	for j := range order {
		order[j] = j
	}
	sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
	out := make([]Ranked, 0, min(top, len(names)))
	for _, j := range order[:min(top, len(names))] {
		if math.IsNaN(probs[j]) {
			return nil, errors.New("the model's scores are not finite (NaN)")
		}
		out = append(out, Ranked{Class: names[j], Prob: probs[j]})
	}
	return out, nil
}

// Softmax returns the probabilities of logits.
func Softmax(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	p := make([]float64, len(logits))
	var s float64
	for i, v := range logits {
		p[i] = math.Exp(float64(v) - mx)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// WriteText prints the prediction as `pfedmma predict` does: a heading
// (none for zero-shot, which names no method), then each image and its
// ranked classes.
func (p *Prediction) WriteText(w io.Writer) error {
	if p.Method != "" {
		fmt.Fprintf(w, "%s, site %d, label space %s (%d classes)\n", p.Method, p.Client, p.Space, p.Classes)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, img := range p.Images {
		fmt.Fprintf(tw, "%s\n", img.Image)
		for r, c := range img.Top {
			fmt.Fprintf(tw, "  %d.\t%s\t%6.2f%%\n", r+1, c.Class, 100*c.Prob)
		}
	}
	return tw.Flush()
}
