package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/pfedmma/pfedmma/federation"
)

// HostedSite is one of the sites a multi-client site process serves: its
// own configuration (certificate name, state folder) and client.
type HostedSite struct {
	Config SiteConfig
	Client federation.Client
}

// RunSites serves several sites from one process (`pfedmma site --clients`),
// each exactly as RunSite would: its own certificate, session, heartbeat and
// state folder, so the coordinator checks every hosted client as it checks
// a site process of its own (registration, example count, duplicate
// sessions, revocation). The clients may share a model and caches: at most
// turns of them train or evaluate at once (≤ 0 means 1, one after the
// other), the others' sessions staying alive meanwhile. It returns nil once
// every hosted site learnt that the federation is over; when one of them
// fails for good (refused, or the coordinator failed) the others are
// stopped and the error names the failing sites.
func RunSites(ctx context.Context, sites []HostedSite, turns int) error {
	if len(sites) == 0 {
		return errors.New("site: no hosted clients")
	}
	turn := make(chan struct{}, max(turns, 1))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make([]error, len(sites))
	var wg sync.WaitGroup
	for i, h := range sites {
		wg.Go(func() {
			site := &inTurn{ClientProxy: federation.NewSite(h.Client, h.Config.StateDir), turn: turn}
			errs[i] = runSite(ctx, h.Config, site)
			if errs[i] != nil && ctx.Err() == nil {
				cancel(fmt.Errorf("%w: site %q: %w", errHostedFailed, h.Config.Name, errs[i]))
			}
		})
	}
	wg.Wait()
	var failed []error
	var stopped []string
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled) && ctx.Err() != nil:
			// stopped: because another hosted site failed, or the
			// process is being stopped (ctx.Err below)
			if errors.Is(context.Cause(ctx), errHostedFailed) {
				stopped = append(stopped, sites[i].Config.Name)
			}
		default:
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		if len(stopped) > 0 {
			failed = append(failed, fmt.Errorf("this process's other hosted sites were stopped: %s", strings.Join(stopped, ", ")))
		}
		return errors.Join(failed...)
	}
	return ctx.Err()
}

// errHostedFailed is the cause of the context a multi-client process's
// sites are stopped with when one of them failed.
var errHostedFailed = errors.New("a hosted site failed")

// inTurn lets at most cap(turn) of a process's hosted sites train or
// evaluate at once.
type inTurn struct {
	federation.ClientProxy
	turn chan struct{}
}

func (s *inTurn) acquire(ctx context.Context) error {
	select {
	case s.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *inTurn) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if err := s.acquire(ctx); err != nil {
		return federation.FitRes{}, err
	}
	defer func() { <-s.turn }()
	return s.ClientProxy.Fit(ctx, ins)
}

func (s *inTurn) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	if err := s.acquire(ctx); err != nil {
		return federation.EvaluateRes{}, err
	}
	defer func() { <-s.turn }()
	return s.ClientProxy.Evaluate(ctx, ins)
}
