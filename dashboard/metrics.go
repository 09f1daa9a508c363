package dashboard

import (
	"strconv"
	"sync"

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
	// PayloadIn and PayloadOut count the payload bytes received from and
	// sent to the sites (federation.RoundReport's BytesUp and BytesDown,
	// added when a round ends): the bytes the summary and the dashboard
	// count. WireIn and WireOut count the tensor messages as they travel
	// (the payload plus its encoding's headers), as they are sent and
	// received, refused uploads excepted.
	PayloadIn, PayloadOut prometheus.Counter
	WireIn, WireOut       prometheus.Counter
	// RoundSeconds is the latency of whole rounds.
	RoundSeconds prometheus.Histogram
	// SiteRefused counts refused uploads by site and reason.
	SiteRefused *prometheus.CounterVec

	sites *siteCollector
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
		PayloadIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "pfedmma_bytes_in_total",
			Help: "Payload bytes of the updates aggregated (summary.json's update bytes), counted when a round ends."}),
		PayloadOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "pfedmma_bytes_out_total",
			Help: "Payload bytes of the instructions answered (summary.json's download bytes), counted when a round ends."}),
		WireIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "pfedmma_wire_bytes_in_total",
			Help: "Tensor message bytes received from sites as encoded on the wire (payload plus encoding headers)."}),
		WireOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "pfedmma_wire_bytes_out_total",
			Help: "Tensor message bytes sent to sites as encoded on the wire (payload plus encoding headers)."}),
		RoundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pfedmma_round_seconds",
			Help: "Duration of federated rounds.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		SiteRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pfedmma_site_refused_updates_total",
			Help: "Uploads refused, by site and reason."}, []string{"site", "reason"}),
		sites: &siteCollector{},
	}
	m.Registry.MustRegister(m.Rounds, m.Participants, m.Failures, m.Refused, m.SiteRefused, m.PayloadIn, m.PayloadOut, m.WireIn, m.WireOut, m.RoundSeconds,
		m.sites, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Watch makes the per-site series (pfedmma_sites_connected,
// pfedmma_site_online, pfedmma_site_last_seen_timestamp_seconds and
// pfedmma_site_eval) read src's status at every scrape, so that they are
// true whoever looks and whether or not the page is open.
func (m *Metrics) Watch(src func() Status) {
	m.sites.mu.Lock()
	m.sites.src = src
	m.sites.mu.Unlock()
}

var (
	descConnected = prometheus.NewDesc("pfedmma_sites_connected", "Sites heard from within three heartbeat intervals.", nil, nil)
	descOnline    = prometheus.NewDesc("pfedmma_site_online", "1 when the site was heard from within three heartbeat intervals.", []string{"site"}, nil)
	descLastSeen  = prometheus.NewDesc("pfedmma_site_last_seen_timestamp_seconds", "Unix time of the site's last contact.", []string{"site"}, nil)
	descEval      = prometheus.NewDesc("pfedmma_site_eval", "The site's metrics in the latest evaluated round.", []string{"site", "metric"}, nil)
	descMean      = prometheus.NewDesc("pfedmma_eval_mean", "The latest evaluated round's mean over sites (hm: HM of the means).", []string{"metric"}, nil)
)

// siteCollector emits the per-site series from a status source.
type siteCollector struct {
	mu  sync.Mutex
	src func() Status
}

func (c *siteCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnected, descOnline, descLastSeen, descEval, descMean} {
		ch <- d
	}
}

func (c *siteCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src == nil {
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, 0)
		return
	}
	st := src()
	online := 0
	names := map[int]string{}
	for _, s := range st.Sites {
		names[s.ID] = s.Name
		v := 0.0
		if s.Online {
			online++
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descOnline, prometheus.GaugeValue, v, s.Name)
		if !s.LastContact.IsZero() {
			ch <- prometheus.MustNewConstMetric(descLastSeen, prometheus.GaugeValue, float64(s.LastContact.UnixNano())/1e9, s.Name)
		}
	}
	ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, float64(online))
	for i := len(st.History) - 1; i >= 0; i-- {
		r := st.History[i]
		if r.Eval == nil {
			continue
		}
		for id, ms := range r.Eval {
			name, ok := names[id]
			if !ok {
				name = strconv.Itoa(id)
			}
			for k, v := range ms {
				ch <- prometheus.MustNewConstMetric(descEval, prometheus.GaugeValue, v, name, k)
			}
		}
		for k, v := range r.EvalMean {
			ch <- prometheus.MustNewConstMetric(descMean, prometheus.GaugeValue, v, k)
		}
		break
	}
}
