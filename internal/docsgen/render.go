package docsgen

import (
	"fmt"
	"strings"
)

const sittingSource = "docs/sitting/table.json and the files it names"

// Blocks renders the table, the sentences that summarise it and each
// method's row alone (speedBlocks).
func (t *SittingTable) Blocks() []Block {
	return append([]Block{
		{Name: "sitting-table", Source: sittingSource, Body: t.table()},
		{Name: "sitting-like-for-like", Source: sittingSource, Body: t.likeForLike()},
		{Name: "sitting-above-bound", Source: sittingSource, Body: t.aboveBound(1.5)},
		{Name: "sitting-cached", Source: sittingSource, Body: t.cachedSummary()},
	}, t.speedBlocks()...)
}

// speedBlocks renders each method's row of the table alone, with the
// header, as block speed-METHOD (the speed row of methods/NAME/README.md).
func (t *SittingTable) speedBlocks() []Block {
	var blocks []Block
	for _, r := range t.Rows {
		blocks = append(blocks, Block{Name: "speed-" + strings.ReplaceAll(r.Method, "_", "-"), Source: sittingSource, Body: tableHead + tableRow(r)})
	}
	return blocks
}

const tableHead = "\n| method | authors' code train / eval images/s (sitting) | fp32 cached: train / eval (ratio), sitting of pfedmma vs authors | fp32 uncached, like for like | bf16 uncached | what pfedmma caches |\n" +
	"|---|---|---|---|---|---|\n"

func (t *SittingTable) table() string {
	var b strings.Builder
	b.WriteString(tableHead)
	for _, r := range t.Rows {
		b.WriteString(tableRow(r))
	}
	return b.String()
}

func tableRow(r SittingRow) string {
	ref := fmt.Sprintf("%.3f / %.3f (%s", r.Ref.Train, r.Ref.Eval, r.Ref.Sitting)
	if r.Ref.Batch != 32 {
		ref += fmt.Sprintf(", batch %d", r.Ref.Batch)
	}
	return fmt.Sprintf("| %s | %s) | %s | %s | %s | %s |\n", r.Method, ref, cell(r.Cached), cell(r.Uncached), cell(r.BF16), r.Caches)
}

func cell(q Ratio) string {
	return fmt.Sprintf("%.2f / %.2f (**%.1f×** / **%.1f×**), %s vs %s",
		q.Ours.Train, q.Ours.Eval, q.Train, q.Eval, q.Ours.Sitting, q.Ref.Sitting)
}

// span1 is the range of the one-decimal ratios, written a–b×.
func span1(xs []float64) string {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%.1f–%.1f×", lo, hi)
}

func (t *SittingTable) collect(keep func(SittingRow) bool, get func(SittingRow) float64) []float64 {
	var xs []float64
	for _, r := range t.Rows {
		if keep(r) {
			xs = append(xs, get(r))
		}
	}
	return xs
}

func all(SittingRow) bool { return true }

func (t *SittingTable) likeForLike() string {
	fp := t.collect(all, func(r SittingRow) float64 { return r.Uncached.Train })
	bf := t.collect(all, func(r SittingRow) float64 { return r.BF16.Train })
	s := fmt.Sprintf("**Like for like, every method is %s the authors in fp32 and %s in bf16 (training)", span1(fp), span1(bf))
	short := true
	for _, r := range t.Rows {
		for _, q := range []Ratio{r.Uncached, r.BF16} {
			if q.Train >= 6 || q.Eval >= 10 {
				short = false
			}
		}
	}
	if short {
		s += ", short of the 6× / 10× targets"
	}
	return s + ".**"
}

// aboveBound lists the rows whose fp32 like-for-like training ratio exceeds
// the bound the prose derives for pFedMMA's step.
func (t *SittingTable) aboveBound(bound float64) string {
	var names []string
	for _, r := range t.Rows {
		if r.Uncached.Train > bound {
			names = append(names, fmt.Sprintf("%s %.1f× (authors' %.3f images/s)", r.Method, r.Uncached.Train, r.Ref.Train))
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("No row exceeds %.1f× in fp32 like for like.", bound)
	}
	return fmt.Sprintf("The rows above %.1f× in fp32 like for like (training) are %s: the bound is pFedMMA's (its authors' step was profiled); theirs were not profiled, and it does not apply to them.", bound, strings.Join(names, ", "))
}

func (t *SittingTable) cachedSummary() string {
	feat := func(r SittingRow) bool { return r.Features }
	tr := t.collect(feat, func(r SittingRow) float64 { return r.Cached.Train })
	ev := t.collect(feat, func(r SittingRow) float64 { return r.Cached.Eval })
	var names []string
	for _, r := range t.Rows {
		if r.Features {
			names = append(names, r.Method)
		}
	}
	return fmt.Sprintf("**On the production path, caching frozen features gives the methods that cache them (%s) %s in training and %s in evaluation.**",
		strings.Join(names, ", "), span1(tr), span1(ev))
}
