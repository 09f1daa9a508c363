package experiment

import (
	"math"

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
