package report

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/pfedmma/pfedmma/eval"
)

// File names written by MetricsLog in its directory.
const (
	MetricsJSONL = "metrics.jsonl"
	MetricsCSV   = "metrics.csv"
)

// ClientMetrics are the metrics of one client in one round.
type ClientMetrics struct {
	ID      int     `json:"id"`
	Metrics Metrics `json:"metrics"`
}

// RoundRecord is what one communication round produced: the mean metrics
// over clients and, optionally, each client's metrics.
type RoundRecord struct {
	Round   int             `json:"round"`
	Method  string          `json:"method,omitempty"`
	Seconds float64         `json:"seconds,omitempty"` // wall time of the round
	Mean    Metrics         `json:"mean"`
	Clients []ClientMetrics `json:"clients,omitempty"`
	// Participants are the clients whose training the round aggregated;
	// Absent those selected or asked to evaluate that did not answer
	// (networked federations: offline, failed or late sites).
	Participants []int `json:"participants,omitempty"`
	Absent       []int `json:"absent,omitempty"`
	// Departed are the clients that had left the schedule (revoked sites):
	// neither asked nor absent.
	Departed []int `json:"departed,omitempty"`
}

// validate checks r and fills Mean from Clients when it is nil.
func (r *RoundRecord) validate() error {
	if r.Round < 0 {
		return fmt.Errorf("round %d: negative round", r.Round)
	}
	seen := map[int]bool{}
	sets := make([]Metrics, 0, len(r.Clients))
	for _, c := range r.Clients {
		if seen[c.ID] {
			return fmt.Errorf("round %d: client %d listed twice", r.Round, c.ID)
		}
		seen[c.ID] = true
		sets = append(sets, c.Metrics)
	}
	if r.Mean == nil && len(r.Clients) > 0 {
		r.Mean = eval.MeanOf(sets...)
	}
	for k := range r.Mean {
		if k == "" {
			return fmt.Errorf("round %d: empty metric name", r.Round)
		}
	}
	return nil
}

// MetricsLog appends RoundRecords to metrics.jsonl (one JSON object per line,
// appended and synced per round) and rewrites metrics.csv atomically after
// every append, so that its header covers every metric and client seen so
// far. Safe for concurrent use.
type MetricsLog struct {
	mu      sync.Mutex
	dir     string
	jsonl   *os.File
	records []RoundRecord
}

// NewMetricsLog creates dir if needed and starts fresh metrics files in it,
// truncating earlier ones. To continue an earlier log, read it with
// ReadMetricsJSONL and Append its records to the new log.
func NewMetricsLog(dir string) (*MetricsLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("metrics log: %w", err)
	}
	path := filepath.Join(dir, MetricsJSONL)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("metrics log: %w", err)
	}
	l := &MetricsLog{dir: dir, jsonl: f}
	if err := l.writeCSV(); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// Append records one round. A nil Mean is filled with the unweighted mean
// over Clients.
func (l *MetricsLog) Append(r RoundRecord) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("metrics log %s: %w", l.dir, err)
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("metrics log %s: round %d: %w", l.dir, r.Round, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jsonl == nil {
		return fmt.Errorf("metrics log %s: append after close", l.dir)
	}
	if _, err := l.jsonl.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("metrics log %s: %w", l.jsonl.Name(), err)
	}
	if err := l.jsonl.Sync(); err != nil {
		return fmt.Errorf("metrics log %s: %w", l.jsonl.Name(), err)
	}
	l.records = append(l.records, cloneRecord(r))
	return l.writeCSV()
}

// Records returns a copy of the records appended so far.
func (l *MetricsLog) Records() []RoundRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]RoundRecord, len(l.records))
	for i, r := range l.records {
		out[i] = cloneRecord(r)
	}
	return out
}

// Close closes the JSONL file. Appending after Close is an error.
func (l *MetricsLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jsonl == nil {
		return nil
	}
	err := l.jsonl.Close()
	l.jsonl = nil
	if err != nil {
		return fmt.Errorf("metrics log %s: %w", l.dir, err)
	}
	return nil
}

func cloneRecord(r RoundRecord) RoundRecord {
	r.Mean = cloneMetrics(r.Mean)
	cs := make([]ClientMetrics, len(r.Clients))
	for i, c := range r.Clients {
		cs[i] = ClientMetrics{ID: c.ID, Metrics: cloneMetrics(c.Metrics)}
	}
	if r.Clients == nil {
		cs = nil
	}
	r.Clients = cs
	return r
}

func cloneMetrics(m Metrics) Metrics {
	if m == nil {
		return nil
	}
	out := make(Metrics, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// CSVColumns returns the CSV header for records: round, method, seconds,
// then mean_<metric> for every mean metric, then client<id>_<metric> for
// every client (by ascending id) and metric; metrics in MetricOrder.
func CSVColumns(records []RoundRecord) []string {
	var meanKeys []string
	clientKeys := map[int][]string{}
	for _, r := range records {
		meanKeys = append(meanKeys, r.Mean.Keys()...)
		for _, c := range r.Clients {
			clientKeys[c.ID] = append(clientKeys[c.ID], c.Metrics.Keys()...)
		}
	}
	cols := []string{"round", "method", "seconds"}
	for _, k := range eval.MetricOrder(meanKeys) {
		cols = append(cols, "mean_"+k)
	}
	ids := make([]int, 0, len(clientKeys))
	for id := range clientKeys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for _, k := range eval.MetricOrder(clientKeys[id]) {
			cols = append(cols, "client"+strconv.Itoa(id)+"_"+k)
		}
	}
	return cols
}

// WriteCSV writes records as CSV with the header CSVColumns(records); a
// metric a record lacks is an empty cell.
func WriteCSV(w io.Writer, records []RoundRecord) error {
	cols := CSVColumns(records)
	index := make(map[string]int, len(cols))
	for i, c := range cols {
		index[c] = i
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(cols); err != nil {
		return err
	}
	row := make([]string, len(cols))
	for _, r := range records {
		clear(row)
		row[0] = strconv.Itoa(r.Round)
		row[1] = r.Method
		if r.Seconds != 0 {
			row[2] = formatFloat(r.Seconds)
		}
		for k, v := range r.Mean {
			row[index["mean_"+k]] = formatFloat(v)
		}
		for _, c := range r.Clients {
			for k, v := range c.Metrics {
				row[index["client"+strconv.Itoa(c.ID)+"_"+k]] = formatFloat(v)
			}
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func (l *MetricsLog) writeCSV() error {
	return writeFileAtomic(filepath.Join(l.dir, MetricsCSV), func(w io.Writer) error {
		return WriteCSV(w, l.records)
	})
}

// ReadMetricsJSONL reads the records of a metrics.jsonl file. A truncated
// last line (a run killed mid-write) is ignored; any other bad line is an
// error naming its line number.
func ReadMetricsJSONL(path string) ([]RoundRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", path, err)
	}
	defer f.Close()
	var out []RoundRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var pending error
	for n := 1; sc.Scan(); n++ {
		if pending != nil {
			return nil, pending
		}
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var r RoundRecord
		if err := json.Unmarshal(line, &r); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) {
				// Tolerated only on the last line.
				pending = fmt.Errorf("metrics %s: line %d: %w", path, n, err)
				continue
			}
			return nil, fmt.Errorf("metrics %s: line %d: %w", path, n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics %s: %w", path, err)
	}
	return out, nil
}
