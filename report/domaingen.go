package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Fold is one leave-one-domain-out run of one method: the domain held out,
// the global model's accuracy on it, and the accuracy of each source
// domain's personalised model(s) on that domain.
type Fold struct {
	HeldOut string
	// Global is the global model's accuracy on the held-out domain; NaN
	// when the method has no global model.
	Global float64
	// Personal maps a source domain to the mean accuracy of its clients'
	// personalised models on their own test images.
	Personal map[string]float64
}

// LODOMatrix is FedOT's accuracy matrix of one method: A[i][j] is, in the
// run that held out domain i, the global model's accuracy on domain i
// (j = i: generalisation) or domain j's personalised model's accuracy on
// domain j (j ≠ i: personalisation). Entries of runs not made are NaN.
type LODOMatrix struct {
	Method  string
	Domains []string
	A       [][]float64
}

// NewLODOMatrix arranges a method's folds over domains. A fold holding out
// an unknown domain, a domain held out twice, or a personal accuracy of an
// unknown or the held-out domain is an error.
func NewLODOMatrix(method string, domains []string, folds []Fold) (LODOMatrix, error) {
	m := LODOMatrix{Method: method, Domains: slices.Clone(domains), A: make([][]float64, len(domains))}
	for i := range m.A {
		m.A[i] = make([]float64, len(domains))
		for j := range m.A[i] {
			m.A[i][j] = math.NaN()
		}
	}
	done := map[int]bool{}
	for _, f := range folds {
		i := slices.Index(domains, f.HeldOut)
		if i < 0 {
			return LODOMatrix{}, fmt.Errorf("report: %s: held-out domain %q not in %q", method, f.HeldOut, domains)
		}
		if done[i] {
			return LODOMatrix{}, fmt.Errorf("report: %s: domain %q held out twice", method, f.HeldOut)
		}
		done[i] = true
		m.A[i][i] = f.Global
		for d, v := range f.Personal {
			j := slices.Index(domains, d)
			if j < 0 || j == i {
				return LODOMatrix{}, fmt.Errorf("report: %s: fold holding out %q has a personal accuracy for %q", method, f.HeldOut, d)
			}
			m.A[i][j] = v
		}
	}
	return m, nil
}

// GPC returns FedOT's metrics over the finite entries: "G" the mean of the
// diagonal (generalisation), "P" the mean off the diagonal
// (personalisation), "C" the mean of all (comprehensive). G and C are left
// out when no diagonal entry is finite (a method without a global model),
// P when no off-diagonal one is.
func (m LODOMatrix) GPC() Metrics {
	var g, p, all []float64
	for i, row := range m.A {
		for j, v := range row {
			if !finite(v) {
				continue
			}
			all = append(all, v)
			if i == j {
				g = append(g, v)
			} else {
				p = append(p, v)
			}
		}
	}
	out := Metrics{}
	if len(g) > 0 {
		out["G"], out["C"] = lodoMean(g), lodoMean(all)
	}
	if len(p) > 0 {
		out["P"] = lodoMean(p)
	}
	return out
}

// Generalization returns the diagonal keyed by domain, with "avg" their
// mean (FedOT's generalisation tables, ADAPT's per-domain tables).
func (m LODOMatrix) Generalization() Metrics {
	out := Metrics{}
	var vs []float64
	for i, d := range m.Domains {
		if v := m.A[i][i]; finite(v) {
			out[d] = v
			vs = append(vs, v)
		}
	}
	if len(vs) > 0 {
		out["avg"] = lodoMean(vs)
	}
	return out
}

func lodoMean(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs))
}

// Markdown renders the matrix: one row per held-out domain, one column per
// evaluated domain, the diagonal (generalisation) in italics, "-" where no
// run was made, followed by the G/P/C line.
func (m LODOMatrix) Markdown() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "**%s: accuracy (%%) per held-out domain (rows) and evaluated domain (columns)**\n\n", escapeCell(m.Method))
	sb.WriteString("| held out |")
	for _, d := range m.Domains {
		sb.WriteString(" " + escapeCell(d) + " |")
	}
	sb.WriteString("\n|:--|" + strings.Repeat("--:|", len(m.Domains)) + "\n")
	for i, row := range m.A {
		sb.WriteString("| " + escapeCell(m.Domains[i]) + " |")
		for j, v := range row {
			c := "-"
			if finite(v) {
				c = strconv.FormatFloat(v, 'f', 2, 64)
				if i == j {
					c = "*" + c + "*"
				}
			}
			sb.WriteString(" " + c + " |")
		}
		sb.WriteByte('\n')
	}
	gpc := m.GPC()
	sb.WriteString("\n")
	for k, key := range []string{"G", "P", "C"} {
		if k > 0 {
			sb.WriteString(", ")
		}
		c := "-"
		if v, ok := gpc[key]; ok {
			c = strconv.FormatFloat(v, 'f', 2, 64)
		}
		sb.WriteString(key + " " + c)
	}
	sb.WriteString("\n")
	return sb.String()
}

// GPCTable is FedOT's Table 1 for one dataset: one row per method, columns
// G, P and C.
func GPCTable(title string, ms []LODOMatrix) Table {
	t := Table{Title: title, Columns: []string{"G", "P", "C"}}
	for _, m := range ms {
		t.Rows = append(t.Rows, MethodResult{Method: m.Method, Metrics: m.GPC()})
	}
	return t
}

// GPCTableMulti is FedOT's Table 1 over several datasets: one row per method
// (in first-seen order), columns "<dataset> G", "<dataset> P", "<dataset> C"
// per dataset, then "Average G/P/C" over the datasets that have the metric.
func GPCTableMulti(title string, datasets []string, byDataset map[string][]LODOMatrix) Table {
	t := Table{Title: title}
	var methods []string
	rows := map[string]Metrics{}
	sums := map[string]map[string][]float64{}
	for _, ds := range datasets {
		for _, k := range []string{"G", "P", "C"} {
			t.Columns = append(t.Columns, ds+" "+k)
		}
		for _, m := range byDataset[ds] {
			if _, ok := rows[m.Method]; !ok {
				methods = append(methods, m.Method)
				rows[m.Method] = Metrics{}
				sums[m.Method] = map[string][]float64{}
			}
			for k, v := range m.GPC() {
				rows[m.Method][ds+" "+k] = v
				sums[m.Method][k] = append(sums[m.Method][k], v)
			}
		}
	}
	for _, k := range []string{"G", "P", "C"} {
		t.Columns = append(t.Columns, "Average "+k)
	}
	for _, name := range methods {
		for k, vs := range sums[name] {
			rows[name]["Average "+k] = lodoMean(vs)
		}
		t.Rows = append(t.Rows, MethodResult{Method: name, Metrics: rows[name]})
	}
	return t
}

// GeneralizationTable is the domain-generalisation layout (FedOT's Tables
// 4–8, ADAPT's per-domain tables): one row per method, one column per
// held-out domain (the global model's accuracy on it) and "avg".
func GeneralizationTable(title string, ms []LODOMatrix) Table {
	t := Table{Title: title}
	if len(ms) > 0 {
		t.Columns = append(slices.Clone(ms[0].Domains), "avg")
	}
	for _, m := range ms {
		t.Rows = append(t.Rows, MethodResult{Method: m.Method, Metrics: m.Generalization()})
	}
	return t
}

// DatasetTable lays out one metric of several runs as pFedMoAP's Table 1:
// one row per method (in first-seen order), one column per dataset, and
// "avg" over the datasets a method has.
func DatasetTable(title, metric string, datasets []string, sums map[string]*Summary) Table {
	t := Table{Title: title, Columns: append(slices.Clone(datasets), "avg")}
	var methods []string
	rows := map[string]Metrics{}
	for _, ds := range datasets {
		s := sums[ds]
		if s == nil {
			continue
		}
		for _, r := range s.Methods {
			v, ok := r.Metrics[metric]
			if !ok {
				continue
			}
			if _, seen := rows[r.Method]; !seen {
				methods = append(methods, r.Method)
				rows[r.Method] = Metrics{}
			}
			rows[r.Method][ds] = v
		}
	}
	for _, name := range methods {
		var vs []float64
		for _, ds := range datasets {
			if v, ok := rows[name][ds]; ok {
				vs = append(vs, v)
			}
		}
		rows[name]["avg"] = lodoMean(vs)
		t.Rows = append(t.Rows, MethodResult{Method: name, Metrics: rows[name]})
	}
	return t
}
