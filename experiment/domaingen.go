package experiment

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/report"
)

// LODOFold reads one leave-one-domain-out (or domain-generalisation) run
// from its final round record: each source domain's personal accuracy is
// the mean "acc" of its clients, and the global model's accuracy on the
// held-out domain is rec.Mean[protocol.GlobalMetric] (NaN when the runner
// recorded none: a method without a global model).
func LODOFold(t *protocol.Task, rec report.RoundRecord) report.Fold {
	acc := map[int]float64{}
	for _, c := range rec.Clients {
		if v, ok := c.Metrics["acc"]; ok {
			acc[c.ID] = v
		}
	}
	g, ok := rec.Mean[protocol.GlobalMetric]
	if !ok {
		g = math.NaN()
	}
	return report.Fold{HeldOut: t.HeldOut, Global: g, Personal: t.DomainMeans(acc)}
}

// runFolds runs leave_one_domain_out / domain_generalization once per
// held-out domain (protocol.held_out empty: every domain in turn), each fold
// in OutDir/fold-<domain>/ with its own reports and checkpoints, then writes
// the methods' accuracy matrices and FedOT's G/P/C table (lodo.md, and the
// G/P/C per method in summary.json).
func runFolds(ctx context.Context, o Options) (*Result, error) {
	dsOpts := o.DatasetOptions
	if dsOpts.Seed == 0 {
		dsOpts.Seed = o.Seed
	}
	ds, err := dataset.Load(o.Dataset, o.Root, dsOpts)
	if err != nil {
		return nil, err
	}
	held, err := protocol.HeldOutDomains(ds, o.Protocol)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	fr, err := runEachFold(ctx, o, held)
	if err != nil {
		return nil, err
	}
	if o.ValidationOnly {
		return fr.validationResult(o, ds, held)
	}
	return fr.lodoResult(o, ds, held)
}

// foldResults are what the folds of a leave-one-domain-out run give: each
// method's folds, the validation accuracy of each method's last round
// summed over the folds (and how many), and every fold's records.
type foldResults struct {
	folds   map[string][]report.Fold
	valSum  map[string]float64
	valN    map[string]int
	records []report.RoundRecord
}

// runEachFold runs the experiment once per held-out domain, each in its
// fold-<domain> folder.
func runEachFold(ctx context.Context, o Options, held []string) (*foldResults, error) {
	fr := &foldResults{folds: map[string][]report.Fold{}, valSum: map[string]float64{}, valN: map[string]int{}}
	for k, h := range held {
		fo := o
		fo.Protocol.HeldOut = h
		fo.OutDir = filepath.Join(o.OutDir, "fold-"+foldDirName(h))
		slog.Info("fold", "held_out", h, "fold", k+1, "of", len(held), "out", fo.OutDir)
		res, err := Run(ctx, fo)
		if err != nil {
			return nil, fmt.Errorf("fold %s held out: %w", h, err)
		}
		last := map[string]report.RoundRecord{}
		for _, r := range res.Records {
			last[r.Method] = r
		}
		for _, name := range o.Methods {
			if r, ok := last[name]; ok {
				fr.folds[name] = append(fr.folds[name], LODOFold(res.Task, r))
				if v, ok := r.Mean[protocol.ValidationMetric]; ok {
					fr.valSum[name] += v
					fr.valN[name]++
				}
			}
		}
		fr.records = append(fr.records, res.Records...)
	}
	return fr, nil
}

// validationResult is the result of a run that scored no test image: the
// folds' mean validation accuracy only.
func (fr *foldResults) validationResult(o Options, ds *dataset.Dataset, held []string) (*Result, error) {
	sum := &report.Summary{Protocol: o.Protocol.Name, Metrics: []string{protocol.ValidationMetric}}
	for _, name := range o.Methods {
		if fr.valN[name] > 0 {
			sum.Set(name, report.Metrics{protocol.ValidationMetric: fr.valSum[name] / float64(fr.valN[name])})
		}
	}
	res := &Result{Summary: sum, Table: sum.Table(fmt.Sprintf("%s — %s, validation over %d folds", ds.Name, o.Protocol.Name, len(held))), Records: fr.records}
	if err := report.WriteSummary(filepath.Join(o.OutDir, "summary.json"), sum); err != nil {
		return nil, err
	}
	return res, nil
}

// lodoResult writes the folds' accuracy matrices, their G/P/C summary and
// report.md, and returns the result.
func (fr *foldResults) lodoResult(o Options, ds *dataset.Dataset, held []string) (*Result, error) {
	sum := &report.Summary{Protocol: o.Protocol.Name, Metrics: []string{"G", "P", "C"}}
	run := report.LODORun{Dataset: ds.Name, Protocol: o.Protocol.Name, Domains: ds.Domains}
	for _, name := range o.Methods {
		m, err := report.NewLODOMatrix(name, ds.Domains, fr.folds[name])
		if err != nil {
			return nil, err
		}
		run.Matrices = append(run.Matrices, m)
		gpc := m.GPC()
		if fr.valN[name] > 0 {
			gpc[protocol.ValidationMetric] = fr.valSum[name] / float64(fr.valN[name])
		}
		sum.Set(name, gpc)
	}
	if len(fr.valN) > 0 {
		sum.Metrics = append(sum.Metrics, protocol.ValidationMetric)
	}
	intro := fmt.Sprintf("Dataset `%s`, protocol `%s`, held out in turn: %s; methods %v, %d rounds, seed %d. "+
		"Row i is the run holding out domain i: the diagonal (italics) is the global model on the held-out domain, "+
		"the other entries each source domain's personalised models on their own domain. Every fold's own report is in fold-<domain>/.\n\n",
		o.Dataset, o.Protocol.Name, strings.Join(held, ", "), o.Methods, o.Rounds, o.Seed)
	doc := run.Document(intro)
	res := &Result{Summary: sum, Table: doc.Tables[0], Records: fr.records}
	if err := report.WriteSummary(filepath.Join(o.OutDir, "summary.json"), sum); err != nil {
		return nil, err
	}
	if err := report.WriteLODO(filepath.Join(o.OutDir, report.LODOFile), run); err != nil {
		return nil, err
	}
	if err := report.WriteMarkdown(filepath.Join(o.OutDir, "report.md"), doc); err != nil {
		return nil, err
	}
	return res, nil
}

// foldDirName makes a domain name safe as a folder name.
func foldDirName(d string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, d)
}
