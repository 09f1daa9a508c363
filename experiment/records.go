package experiment

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/report"
)

// The metrics log's records and the summary's table: the same for a
// simulated run and a federation over the network.

func tableTitle(name string, t *protocol.Task) string {
	return fmt.Sprintf("%s — %s, %d clients", name, t.Protocol, len(t.Clients))
}

// summaryMetrics are the columns of the summary table.
func summaryMetrics(t *protocol.Task) []string {
	if t.Protocol == protocol.Domains && !t.ValidationOnly {
		cols := append(append([]string{}, t.Dataset.Domains...), "avg")
		if slices.Contains(t.Metrics, protocol.ValidationMetric) {
			cols = append(cols, protocol.ValidationMetric)
		}
		return cols
	}
	return t.Metrics
}

// finalMetrics summarises the last round: client means, with HM of the means
// for base-to-novel, and per-domain means for the domains protocol.
func finalMetrics(t *protocol.Task, r report.RoundRecord) report.Metrics {
	out := report.Metrics{}
	switch {
	case t.ValidationOnly:
		// only the validation accuracy was scored; added below
	case t.Protocol == protocol.BaseToNovel:
		for _, k := range []string{"local", "base", "novel"} {
			out[k] = r.Mean[k]
		}
		out["hm"] = eval.HM(out["local"], out["base"], out["novel"])
	case t.Protocol == protocol.Domains:
		sums, counts := map[int]float64{}, map[int]int{}
		dom := map[int]int{}
		for _, c := range t.Clients {
			dom[c.ID] = c.Domain
		}
		for _, c := range r.Clients {
			sums[dom[c.ID]] += c.Metrics["acc"]
			counts[dom[c.ID]]++
		}
		var avg float64
		for d, name := range t.Dataset.Domains {
			if counts[d] > 0 {
				out[name] = sums[d] / float64(counts[d])
				avg += out[name]
			}
		}
		out["avg"] = avg / float64(max(len(counts), 1))
	default:
		for _, k := range t.Metrics {
			if v, ok := r.Mean[k]; ok {
				out[k] = v
			}
		}
	}
	if v, ok := r.Mean[protocol.ValidationMetric]; ok {
		out[protocol.ValidationMetric] = v
	}
	if v, ok := r.Mean[federation.PersonalMetric]; ok {
		out[federation.PersonalMetric] = v // eval.personal
	}
	// the privacy spent by the end (a method's own DP: DP-FPL's ε)
	for k, v := range r.Mean {
		if strings.HasPrefix(k, "dp_") {
			out[k] = v
		}
	}
	return out
}

// RoundRecord turns a federation round into the metrics log's record: each
// evaluated client's metrics (with its training loss and the privacy it
// reports spent, "dp_*": DP-FPL's ε) and their mean.
func RoundRecord(method string, r federation.RoundReport) report.RoundRecord {
	rec := report.RoundRecord{Round: r.Round, Method: method, Seconds: r.Seconds, Participants: r.Participants, Absent: r.Absent, Departed: r.Departed}
	for _, id := range slices.Sorted(maps.Keys(r.Eval)) {
		m := maps.Clone(r.Eval[id])
		if f, ok := r.Fit[id]; ok {
			m["loss"] = f["loss"]
			for k, v := range f {
				if strings.HasPrefix(k, "dp_") {
					m[k] = v
				}
			}
		}
		rec.Clients = append(rec.Clients, report.ClientMetrics{ID: id, Metrics: m})
	}
	rec.Mean = clientMean(rec.Clients)
	strategyMetrics(&rec, r.Strategy)
	if len(rec.Clients) > 0 {
		// FLiP's personal accuracy (eval.personal), beside the evaluation
		strategyMetrics(&rec, r.PersonalMean)
	}
	return rec
}

func clientMean(cs []report.ClientMetrics) report.Metrics {
	ms := make([]eval.Metrics, len(cs))
	for i, c := range cs {
		ms[i] = c.Metrics
	}
	return eval.ClientMean(ms...)
}

func fmtMetrics(m report.Metrics) string {
	var parts []string
	for _, k := range m.Keys() {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, m[k]))
	}
	return strings.Join(parts, " ")
}
