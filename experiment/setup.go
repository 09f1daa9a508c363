package experiment

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/session"
)

// setup is what a job is before any image is read, the same for `pfedmma
// run` (every method of o), `pfedmma serve` and `pfedmma site` (its one
// trained method): the methods and their depths on the model, the data set
// and the task, the prompt template and the augmentation.
type setup struct {
	names   []string
	methods []methods.Method
	// depths[i] is methods[i]'s Depth on the model (AnyDepth for a method
	// running from any cached prefix).
	depths []int
	// splits[i] says whether methods[i] wants split records
	// (methods.Splitter).
	splits []bool
	model  checkpoint.Info
	// layers is the model's depth: the fewer of its encoders' blocks.
	layers int
	resNet bool
	ds     *dataset.Dataset
	task   *protocol.Task
	tmpl   string
	views  int
	online bool
}

// cacheKey names one cache of frozen records: the depth ℓ and whether its
// records are split (block ℓ's branch input and frozen output).
type cacheKey struct {
	depth int
	split bool
}

// keys returns each method's cache; a method of any depth (zero-shot) runs
// on the first other method's, or on anyDepth when there is none.
func (s *setup) keys(anyDepth int) (perMethod, distinct []cacheKey) {
	perMethod = make([]cacheKey, len(s.depths))
	for i, d := range s.depths {
		k := cacheKey{d, s.splits[i]}
		perMethod[i] = k
		if d != methods.AnyDepth && !slices.Contains(distinct, k) {
			distinct = append(distinct, k)
		}
	}
	if len(distinct) == 0 {
		distinct = []cacheKey{{depth: anyDepth}}
	}
	for i := range perMethod {
		if perMethod[i].depth == methods.AnyDepth {
			perMethod[i] = distinct[0]
		}
	}
	return perMethod, distinct
}

// newSetup resolves o for the methods names (each must be registered): it
// reads the model's header (not its weights), checks that every method can
// run on it and with the federation's clients, and builds the task.
func newSetup(o Options, names []string) (*setup, error) {
	s := &setup{names: names, methods: make([]methods.Method, len(names)), depths: make([]int, len(names)), splits: make([]bool, len(names))}
	var err error
	if s.views, s.online, err = parseAugment(o.Augment); err != nil {
		return nil, err
	}
	for i, name := range names {
		if s.methods[i], err = methods.Get(name); err != nil {
			return nil, fmt.Errorf("experiment: %w", err)
		}
	}
	// The header gives the architecture; the weights are loaded once the
	// memory estimate says they fit with the rest.
	if err := inputfile.CheckAny(o.ModelPath); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	info, err := checkpoint.Inspect(o.ModelPath)
	if err != nil {
		return nil, err
	}
	s.model = *info
	s.layers = min(info.Config.Vision.Layers, info.Config.Text.Layers)
	s.resNet = info.Config.Vision.ResNet
	for i, meth := range s.methods {
		if s.depths[i], err = meth.Depth(o.Sections[names[i]], s.layers); err != nil {
			if s.resNet {
				return nil, fmt.Errorf("method %s cannot run on a ResNet CLIP (it needs the ViT's blocks): %w", names[i], err)
			}
			return nil, err
		}
		if err := backboneFits(s.resNet, meth, s.depths[i]); err != nil {
			return nil, err
		}
		if s.splits[i], err = methods.SplitRecords(meth, o.Sections[names[i]], s.layers); err != nil {
			return nil, err
		}
	}
	dsOpts := o.DatasetOptions
	if dsOpts.Seed == 0 {
		dsOpts.Seed = o.Seed
	}
	if s.ds, err = dataset.Load(o.Dataset, o.Root, dsOpts); err != nil {
		return nil, err
	}
	popts := o.Protocol
	popts.Seed = o.Seed
	if s.task, err = protocol.Build(s.ds, popts); err != nil {
		return nil, err
	}
	if o.ValidationOnly {
		if err := s.task.KeepValidationOnly(); err != nil {
			return nil, err
		}
	}
	for i, meth := range s.methods {
		if tc, ok := meth.(methods.TaskChecker); ok {
			if err := tc.CheckTask(o.Sections[names[i]], len(s.task.Clients)); err != nil {
				return nil, err
			}
		}
	}
	s.tmpl = o.Template
	if s.tmpl == "" {
		s.tmpl = "a photo of a {}."
	}
	return s, nil
}

// siteBytes averages, over every round of each method's federation, the
// payload bytes one site uploads (the round's upload over the sites whose
// update was aggregated) and downloads (the round's training and
// evaluation instructions over the federation's sites less the round's
// absent and departed ones): site-rounds where a site was absent or had
// left the schedule do not count. `run`
// and `serve` report it alike.
type siteBytes struct {
	clients int
	// up and down sum the bytes; upN and downN the site-rounds they came
	// from
	up, down   map[string]float64
	upN, downN map[string]int
	rounds     map[string]int
	// totals over every round (all sites), and the encoding counted
	// (federation.compress: the on-wire bytes of the tensors)
	totalUp, totalDown map[string]int64
	codec              compress.Codec
}

func newSiteBytes(clients int) *siteBytes {
	return &siteBytes{clients: max(clients, 1), up: map[string]float64{}, down: map[string]float64{}, rounds: map[string]int{},
		upN: map[string]int{}, downN: map[string]int{}, totalUp: map[string]int64{}, totalDown: map[string]int64{}}
}

// add counts one round of method's federation.
func (b *siteBytes) add(method string, r federation.RoundReport) {
	if len(r.Selected) == 0 {
		return
	}
	up := len(r.Participants)
	if up == 0 && r.Participants == nil {
		up = len(r.Selected) - len(r.Failures) // a report from before Participants
	}
	b.up[method] += float64(r.BytesUp)
	b.upN[method] += up
	b.down[method] += float64(r.BytesDown)
	b.downN[method] += max(b.clients-len(r.Absent)-len(r.Departed), 0)
	b.rounds[method]++
	b.totalUp[method] += r.BytesUp
	b.totalDown[method] += r.BytesDown
}

// extra is the summary's figures (nil when no round was counted).
func (b *siteBytes) extra() map[string]any {
	if len(b.rounds) == 0 {
		return nil
	}
	up, down := map[string]float64{}, map[string]float64{}
	for m := range b.rounds {
		up[m] = b.up[m] / float64(max(b.upN[m], 1))
		down[m] = b.down[m] / float64(max(b.downN[m], 1))
	}
	return map[string]any{"update_bytes_per_round_per_site": up, "download_bytes_per_round_per_site": down,
		"update_bytes_total": b.totalUp, "download_bytes_total": b.totalDown, "compress": cmp.Or(string(b.codec), string(compress.None))}
}

// Federation is how o federates a method's plan (session.Federation):
// the aggregation section, secure aggregation, compression and the
// schedule — the rounds, the sampling of sites and the rounds after which
// every site is evaluated (federation.eval_every as FromConfig maps it):
// `run` and `serve` start from it alike.
func (o Options) Federation() session.Federation {
	return session.Federation{Aggregation: o.Aggregation, Secure: o.SecureAggregation, Compress: o.Compress, Seed: o.Seed,
		Rounds: o.Rounds, Fraction: o.Fraction, EvalEvery: o.EvalEvery, EvaluateAlone: o.EvaluateAlone,
		DropRate: o.DropRate, PersonalEval: o.PersonalEval}
}
