// Package report writes what a run produces for humans and tools: per-round
// metrics logs (JSONL and CSV), summary.json, Markdown and terminal tables
// shaped like the pFedMMA paper's Table 1, and PNG plots.
//
// It knows nothing of models or federation: callers feed it plain structs
// and maps of named metrics (eval.Metrics). Whole files are written
// atomically (temporary file + rename), so a reader never sees a
// half-written file.
package report

import "github.com/pfedmma/pfedmma/eval"

// Metrics maps metric names to values (eval.Metrics).
type Metrics = eval.Metrics

// BaseToNovelMetrics are the metric keys of the base-to-novel protocol, in
// the column order of the paper's Table 1.
var BaseToNovelMetrics = eval.BaseToNovelMetrics

func formatFloat(v float64) string { return eval.FormatFloat(v) }
