package federation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// FileStore keeps the coordinator's checkpoint in one file, replaced
// atomically after every round.
type FileStore struct{ Path string }

// Save implements CheckpointStore.
func (s FileStore) Save(c *Checkpoint) error { return WriteCheckpoint(s.Path, c) }

// Load implements CheckpointStore.
func (s FileStore) Load() (*Checkpoint, error) {
	ck, err := ReadCheckpoint(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", s.Path, ErrNoCheckpoint)
	}
	return ck, err
}

// SiteStore keeps one client's state in its own folder, one file per round
// after which it was saved ("round-NNNNNN.safetensors"); the two newest are
// kept. A site that trained round r saves its state tagged r; when the
// coordinator (re)starts round R, the site continues from its newest state
// tagged < R, so a round interrupted anywhere is redone exactly. A store
// with no folder keeps nothing.
type SiteStore struct{ Dir string }

const siteKeep = 2

func (s SiteStore) path(round int) string {
	return filepath.Join(s.Dir, fmt.Sprintf("round-%06d.safetensors", round))
}

// rounds lists the saved rounds, ascending.
func (s SiteStore) rounds() ([]int, error) {
	if s.Dir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("site state %s: %w", s.Dir, err)
	}
	var out []int
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "round-")
		n, ok2 := strings.CutSuffix(n, ".safetensors")
		if !ok || !ok2 || !e.Type().IsRegular() {
			continue
		}
		if r, err := strconv.Atoi(n); err == nil && r >= 0 {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Save writes st as the state after round and removes older files beyond
// the two newest.
func (s SiteStore) Save(round int, st tensor.Named) error {
	if s.Dir == "" {
		return nil
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return fmt.Errorf("site state: %w", err)
	}
	path := s.path(round)
	meta := map[string]string{"round": strconv.Itoa(round), "format": "pfedmma-site-state/1"}
	if err := atomicfile.Write(path, func(w io.Writer) error {
		return safetensors.Encode(w, st, nil, meta)
	}); err != nil {
		return fmt.Errorf("site state %s: %w", path, err)
	}
	rs, err := s.rounds()
	if err != nil {
		return err
	}
	for len(rs) > siteKeep {
		if err := os.Remove(s.path(rs[0])); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("site state: %w", err)
		}
		rs = rs[1:]
	}
	return nil
}

// Latest returns the newest state saved after a round < before, and that
// round; ok is false when there is none.
func (s SiteStore) Latest(before int) (st tensor.Named, round int, ok bool, err error) {
	rs, err := s.rounds()
	if err != nil {
		return nil, 0, false, err
	}
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i] >= before {
			continue
		}
		path := s.path(rs[i])
		f, err := safetensors.Open(path)
		if err != nil {
			return nil, 0, false, fmt.Errorf("site state: %w", err)
		}
		st, err := f.Float32All()
		f.Close()
		if err != nil {
			return nil, 0, false, fmt.Errorf("site state %s: %w", path, err)
		}
		return st, rs[i], true, nil
	}
	return nil, 0, false, nil
}

// Site runs one Client with its state kept in a SiteStore, so that the
// client survives its own restart and the coordinator's: before it works on
// round R it makes sure its in-memory state is the one saved after the
// newest round < R (or its initial state), and after training round R it
// saves its state. A Site is the in-process ClientProxy of a simulation, and
// what a site process serves over the network.
type Site struct {
	Client Client
	Store  SiteStore
	// at is the round after which the in-memory state was saved or loaded
	// (-1: the initial state); synced reports whether it was checked
	// against the store since this Site was made or last failed; initial
	// is the client's state before any round, taken at the first check.
	at      int
	synced  bool
	initial tensor.Named
}

// NewSite wraps c with its state folder dir.
func NewSite(c Client, dir string) *Site { return &Site{Client: c, Store: SiteStore{Dir: dir}, at: -1} }

// ID implements ClientProxy.
func (s *Site) ID() int { return s.Client.ID() }

// NumExamples implements ClientProxy.
func (s *Site) NumExamples() int { return s.Client.NumExamples() }

// sync loads the newest saved state before round `before` unless the
// in-memory state already is it.
func (s *Site) sync(before int) error {
	if s.synced && s.at < before {
		return nil
	}
	if s.initial == nil {
		st, err := s.Client.State()
		if err != nil {
			return fmt.Errorf("client %d state: %w", s.ID(), err)
		}
		s.initial = st
	}
	st, r, ok, err := s.Store.Latest(before)
	if err != nil {
		return fmt.Errorf("client %d: %w", s.ID(), err)
	}
	if !ok {
		st, r = s.initial.Clone(), -1
	}
	if err := s.Client.LoadState(st); err != nil {
		return fmt.Errorf("client %d: state after round %d: %w", s.ID(), r, err)
	}
	s.at, s.synced = r, true
	return nil
}

// Fit implements ClientProxy: restore, train, save; then, when ins asks
// (PersonalEvalKey), score the trained model on the client's own sets.
func (s *Site) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	if err := s.sync(ins.Round); err != nil {
		return FitRes{}, err
	}
	res, err := s.Client.Fit(ctx, ins)
	if err != nil {
		// the in-memory state may hold a partial round: reload next time
		s.synced = false
		return FitRes{}, err
	}
	st, err := s.Client.State()
	if err != nil {
		return FitRes{}, fmt.Errorf("client %d state: %w", s.ID(), err)
	}
	if err := s.Store.Save(ins.Round, st); err != nil {
		return FitRes{}, err
	}
	s.at = ins.Round
	if res.NumExamples == 0 {
		res.NumExamples = s.Client.NumExamples()
	}
	if err := s.personalEval(ctx, ins, &res); err != nil {
		return FitRes{}, err
	}
	return res, nil
}

// Evaluate implements ClientProxy on the state after round ins.Round.
// When the evaluation instruction carries tensors (which the client
// installs), the state is saved again after round ins.Round: a site
// restarted later continues from what it evaluated, and keeps it.
func (s *Site) Evaluate(ctx context.Context, ins EvaluateIns) (EvaluateRes, error) {
	if err := s.sync(ins.Round + 1); err != nil {
		return EvaluateRes{}, err
	}
	res, err := s.Client.Evaluate(ctx, ins)
	if err != nil {
		if len(ins.Params) > 0 {
			s.synced = false // a partial install: reload next time
		}
		return res, err
	}
	if len(ins.Params) > 0 {
		st, err := s.Client.State()
		if err != nil {
			return EvaluateRes{}, fmt.Errorf("client %d state: %w", s.ID(), err)
		}
		if err := s.Store.Save(ins.Round, st); err != nil {
			return EvaluateRes{}, err
		}
		s.at = ins.Round
	}
	return res, nil
}

// Restore loads the newest state the site saved (after any round) into
// its client, when there is one: what a site process restarted after the
// federation's last task keeps.
func (s *Site) Restore() error {
	if err := s.sync(math.MaxInt); err != nil {
		return err
	}
	return nil
}
