package report

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// LODOFile is the name of a leave-one-domain-out run's matrices in its
// output folder.
const LODOFile = "lodo.json"

// LODORun is what a run over every held-out domain keeps for `pfedmma
// report`: the dataset, the protocol, its domains and each method's matrix.
type LODORun struct {
	Dataset  string
	Protocol string
	Domains  []string
	Matrices []LODOMatrix
}

type lodoJSON struct {
	Dataset  string       `json:"dataset"`
	Protocol string       `json:"protocol"`
	Domains  []string     `json:"domains"`
	Methods  []lodoMethod `json:"methods"`
}

type lodoMethod struct {
	Method string `json:"method"`
	// A is the matrix by held-out domain (rows) and evaluated domain;
	// null where no value exists.
	A [][]*float64 `json:"a"`
}

// WriteLODO writes r as JSON (NaN entries as null), atomically.
func WriteLODO(path string, r LODORun) error {
	j := lodoJSON{Dataset: r.Dataset, Protocol: r.Protocol, Domains: r.Domains}
	for _, m := range r.Matrices {
		lm := lodoMethod{Method: m.Method, A: make([][]*float64, len(m.A))}
		for i, row := range m.A {
			lm.A[i] = make([]*float64, len(row))
			for k, v := range row {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					lm.A[i][k] = &v
				}
			}
		}
		j.Methods = append(j.Methods, lm)
	}
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return atomicfile.WriteBytes(path, append(data, '\n'))
}

// ReadLODO reads a file written by WriteLODO; a matrix that is not
// domains × domains is an error naming the method.
func ReadLODO(path string) (LODORun, error) {
	data, err := inputfile.ReadFile(path)
	if err != nil {
		return LODORun{}, err
	}
	var j lodoJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return LODORun{}, fmt.Errorf("%s: %w", path, err)
	}
	r := LODORun{Dataset: j.Dataset, Protocol: j.Protocol, Domains: j.Domains}
	n := len(j.Domains)
	for _, lm := range j.Methods {
		if len(lm.A) != n {
			return LODORun{}, fmt.Errorf("%s: method %q: %d rows for %d domains", path, lm.Method, len(lm.A), n)
		}
		m := LODOMatrix{Method: lm.Method, Domains: j.Domains, A: make([][]float64, n)}
		for i, row := range lm.A {
			if len(row) != n {
				return LODORun{}, fmt.Errorf("%s: method %q: row %d has %d entries for %d domains", path, lm.Method, i, len(row), n)
			}
			m.A[i] = make([]float64, n)
			for k, v := range row {
				m.A[i][k] = math.NaN()
				if v != nil {
					if err := CheckMetric("acc", *v); err != nil {
						return LODORun{}, fmt.Errorf("%s: method %q: train without %s, score on %s: %w", path, lm.Method, j.Domains[i], j.Domains[k], err)
					}
					m.A[i][k] = *v
				}
			}
		}
		r.Matrices = append(r.Matrices, m)
	}
	return r, nil
}

// Document renders a run over every held-out domain: each method's matrix,
// FedOT's G/P/C table and the generalisation table (the global model per
// held-out domain, ADAPT's layout).
func (r LODORun) Document(intro string) Document {
	text := intro
	for _, m := range r.Matrices {
		text += fmt.Sprintf("## %s\n\n%s\n", m.Method, m.Markdown())
	}
	title := fmt.Sprintf("%s — %s, G/P/C over %d held-out domains", r.Dataset, r.Protocol, len(r.Domains))
	return Document{Title: "pfedmma leave-one-domain-out", Text: text, Tables: []Table{
		GPCTable(title, r.Matrices),
		GeneralizationTable(fmt.Sprintf("%s — the global model on each held-out domain", r.Dataset), r.Matrices)}}
}
