package federation

import (
	"errors"
	"maps"
	"slices"

	"github.com/pfedmma/pfedmma/eval"
)

// ErrNoCheckpoint is returned (wrapped) by Resume when the store holds no
// checkpoint.
var ErrNoCheckpoint = errors.New("no checkpoint to resume")

// RoundReport is what happened in one round.
type RoundReport struct {
	Round    int   `json:"round"`
	Selected []int `json:"selected"`
	// Fit holds each participant's training metrics; FitMean their
	// unweighted mean over participants.
	Fit     map[int]Metrics `json:"fit"`
	FitMean Metrics         `json:"fit_mean"`
	// Strategy holds the strategy's own metrics after the round's
	// aggregation (a RoundReporter's; e.g. "dp_epsilon").
	Strategy Metrics `json:"strategy,omitempty"`
	// Eval holds every client's evaluation after the round and EvalMean the
	// unweighted mean over clients; both nil in rounds without evaluation.
	Eval     map[int]Metrics `json:"eval"`
	EvalMean Metrics         `json:"eval_mean"`
	// Failures holds the selected clients that delivered nothing (when the
	// coordinator tolerates failures), with the reason.
	Failures map[int]string `json:"failures,omitempty"`
	// Participants are the selected clients whose training was aggregated;
	// Absent the clients that were selected or asked to evaluate but did
	// not answer (offline, failed or late), in ascending order.
	Participants []int `json:"participants,omitempty"`
	Absent       []int `json:"absent,omitempty"`
	// Departed are the clients that had left the schedule
	// (Coordinator.Departed: revoked sites), neither asked nor absent.
	Departed []int `json:"departed,omitempty"`
	// Dropped are the selected clients that trained but whose updates the
	// client drop discarded (Coordinator.DropRate), in ascending order.
	Dropped []int `json:"dropped,omitempty"`
	// Personal holds, with Coordinator.PersonalEval, each kept
	// participant's accuracy on its own test split of the model it trained
	// this round, before aggregation; PersonalMean their mean weighted by
	// example counts ("personal", FLiP's personal benchmark).
	Personal     map[int]float64 `json:"personal,omitempty"`
	PersonalMean Metrics         `json:"personal_mean,omitempty"`
	// BytesDown and BytesUp are the tensor payloads sent to and received
	// from the clients (PayloadBytes; BytesDown counts the evaluation
	// instructions too).
	// FitSeconds, AggregateSeconds and EvalSeconds split Seconds into the
	// round's phases.
	FitSeconds       float64 `json:"fit_seconds,omitempty"`
	AggregateSeconds float64 `json:"aggregate_seconds,omitempty"`
	EvalSeconds      float64 `json:"eval_seconds,omitempty"`
	BytesDown        int64   `json:"bytes_down"`
	BytesUp          int64   `json:"bytes_up"`
	Seconds          float64 `json:"seconds"`
}

// History is the list of completed rounds.
type History struct {
	Rounds []RoundReport `json:"rounds"`
}

// LastEval returns the latest round that was evaluated.
func (h *History) LastEval() (RoundReport, bool) {
	for i := len(h.Rounds) - 1; i >= 0; i-- {
		if h.Rounds[i].Eval != nil {
			return h.Rounds[i], true
		}
	}
	return RoundReport{}, false
}

// Progress reports one finished client step inside a round.
type Progress struct {
	Round, Rounds int
	// Phase is "fit" or "eval".
	Phase       string
	ClientID    int
	Done, Total int
}

// cloneMetrics copies m, never returning nil, so that a report survives a
// JSON round trip unchanged.
func cloneMetrics(m map[string]float64) Metrics {
	if m == nil {
		return Metrics{}
	}
	return Metrics(maps.Clone(m))
}

// meanMetrics is, per metric name, the unweighted mean over the clients that
// report it, summed in client-ID order; "hm" is the harmonic mean of the
// averaged local, base and novel (eval.ClientMean, the papers' HM), the one
// definition used by the report, the dashboard and the coordinator's log.
func meanMetrics(per map[int]Metrics) Metrics {
	sets := make([]Metrics, 0, len(per))
	for _, id := range slices.Sorted(maps.Keys(per)) {
		sets = append(sets, per[id])
	}
	return eval.ClientMean(sets...)
}
