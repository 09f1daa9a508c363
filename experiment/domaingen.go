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
	folds := map[string][]report.Fold{}
	// the validation accuracy (protocol.validation) of each method's last
	// round in each fold, averaged over the folds
	valSum, valN := map[string]float64{}, map[string]int{}
	var records []report.RoundRecord
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
				folds[name] = append(folds[name], LODOFold(res.Task, r))
				if v, ok := r.Mean[protocol.ValidationMetric]; ok {
					valSum[name] += v
					valN[name]++
				}
			}
		}
		records = append(records, res.Records...)
	}
	if o.ValidationOnly {
		// no test image was scored: the folds' mean validation accuracy only
		sum := &report.Summary{Protocol: o.Protocol.Name, Metrics: []string{protocol.ValidationMetric}}
		for _, name := range o.Methods {
			if valN[name] > 0 {
				sum.Set(name, report.Metrics{protocol.ValidationMetric: valSum[name] / float64(valN[name])})
			}
		}
		res := &Result{Summary: sum, Table: sum.Table(fmt.Sprintf("%s — %s, validation over %d folds", ds.Name, o.Protocol.Name, len(held))), Records: records}
		if err := report.WriteSummary(filepath.Join(o.OutDir, "summary.json"), sum); err != nil {
			return nil, err
		}
		return res, nil
	}
	sum := &report.Summary{Protocol: o.Protocol.Name, Metrics: []string{"G", "P", "C"}}
	run := report.LODORun{Dataset: ds.Name, Protocol: o.Protocol.Name, Domains: ds.Domains}
	for _, name := range o.Methods {
		m, err := report.NewLODOMatrix(name, ds.Domains, folds[name])
		if err != nil {
			return nil, err
		}
		run.Matrices = append(run.Matrices, m)
		gpc := m.GPC()
		if valN[name] > 0 {
			gpc[protocol.ValidationMetric] = valSum[name] / float64(valN[name])
		}
		sum.Set(name, gpc)
	}
	if len(valN) > 0 {
		sum.Metrics = append(sum.Metrics, protocol.ValidationMetric)
	}
	intro := fmt.Sprintf("Dataset `%s`, protocol `%s`, held out in turn: %s; methods %v, %d rounds, seed %d. "+
		"Row i is the run holding out domain i: the diagonal (italics) is the global model on the held-out domain, "+
		"the other entries each source domain's personalised models on their own domain. Every fold's own report is in fold-<domain>/.\n\n",
		o.Dataset, o.Protocol.Name, strings.Join(held, ", "), o.Methods, o.Rounds, o.Seed)
	doc := run.Document(intro)
	res := &Result{Summary: sum, Table: doc.Tables[0], Records: records}
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
