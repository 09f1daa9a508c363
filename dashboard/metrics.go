package dashboard

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the coordinator's Prometheus series, in a registry of their
// own (so that several coordinators can live in one test process).
type Metrics struct {
	Registry *prometheus.Registry
	// Rounds counts completed rounds; Participants is the number of results
	// aggregated in the latest round; Failures counts selected sites that
	// delivered nothing.
	Rounds       prometheus.Counter
	Participants prometheus.Gauge
	Failures     prometheus.Counter
	// Refused counts refused uploads by reason.
	Refused *prometheus.CounterVec
	// BytesIn and BytesOut count the tensor bytes received from and sent to
	// the sites on the wire.
	BytesIn  prometheus.Counter
	BytesOut prometheus.Counter
	// RoundSeconds is the latency of whole rounds.
	RoundSeconds prometheus.Histogram
	// SitesConnected is the number of sites heard from recently.
	SitesConnected prometheus.Gauge
}

// NewMetrics makes the series in a new registry, with the Go runtime and
// process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Rounds:   prometheus.NewCounter(prometheus.CounterOpts{Name: "pfedmma_rounds_total", Help: "Completed federated rounds."}),
		Participants: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pfedmma_round_participants",
			Help: "Results aggregated in the latest round."}),
		Failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "pfedmma_round_failures_total",
			Help: "Selected sites that delivered no result in a round."}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pfedmma_refused_updates_total",
			Help: "Uploads refused, by reason."}, []string{"reason"}),
		BytesIn:  prometheus.NewCounter(prometheus.CounterOpts{Name: "pfedmma_bytes_in_total", Help: "Tensor bytes received from sites."}),
		BytesOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "pfedmma_bytes_out_total", Help: "Tensor bytes sent to sites."}),
		RoundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pfedmma_round_seconds",
			Help: "Duration of federated rounds.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		SitesConnected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pfedmma_sites_connected",
			Help: "Sites heard from within three heartbeat intervals."}),
	}
	m.Registry.MustRegister(m.Rounds, m.Participants, m.Failures, m.Refused, m.BytesIn, m.BytesOut, m.RoundSeconds,
		m.SitesConnected, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
