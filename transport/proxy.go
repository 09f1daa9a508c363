package transport

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// RemoteProxy is the coordinator's federation.ClientProxy for one remote
// site: Fit and Evaluate enqueue a task that the site fetches with GetTask,
// and wait for its answer or the end of ctx (after which the task is closed
// and a late answer refused).
type RemoteProxy struct {
	s  *Server
	st *siteState
}

// ID implements federation.ClientProxy.
func (p *RemoteProxy) ID() int { return p.st.id }

// NumExamples implements federation.ClientProxy: the count the site
// declared when it registered.
func (p *RemoteProxy) NumExamples() int {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.st.numExamples
}

// Fit implements federation.ClientProxy.
func (p *RemoteProxy) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	res, err := p.send(ctx, pb.TaskKind_TASK_KIND_FIT, ins.Round, ins.Config, ins.Params)
	return res.fit, err
}

// Evaluate implements federation.ClientProxy: the evaluation task carries
// the strategy's evaluation tensors (ins.Params) as a fit task carries its
// download.
func (p *RemoteProxy) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	res, err := p.send(ctx, pb.TaskKind_TASK_KIND_EVALUATE, ins.Round, ins.Config, ins.Params)
	return res.eval, err
}

// send encodes params as the download of a task of kind for round and
// runs it.
func (p *RemoteProxy) send(ctx context.Context, kind pb.TaskKind, round int, config map[string]string, params tensor.Named) (taskResult, error) {
	data, blob, err := encodeMessage(params, p.s.cfg.Compress)
	if err != nil {
		return taskResult{}, fmt.Errorf("site %q round %d: %w", p.st.name, round, err)
	}
	t := &task{id: newTaskID(), site: p.st, round: round, kind: kind, config: config,
		data: data, blob: blob, done: make(chan taskResult, 1)}
	return p.run(ctx, t)
}

func (p *RemoteProxy) run(ctx context.Context, t *task) (taskResult, error) {
	s := p.s
	s.roundStarted(t.round)
	s.mu.Lock()
	if t.site.revoked {
		s.mu.Unlock()
		return taskResult{}, fmt.Errorf("site %q round %d %s: the site's certificate was revoked", t.site.name, t.round, t.kind)
	}
	t.site.queue = append(t.site.queue, t)
	close(t.site.wake)
	t.site.wake = make(chan struct{})
	s.mu.Unlock()
	tk := time.NewTicker(min(s.cfg.Heartbeat, s.cfg.OfflineAfter))
	defer tk.Stop()
	offline := false
wait:
	for {
		select {
		case r := <-t.done:
			return r, r.err
		case <-ctx.Done():
			break wait
		case <-tk.C:
			s.mu.Lock()
			// a site whose restarted process waits to take over keeps
			// its task
			gone := s.cfg.GiveUpOffline && t.state == taskPending && !s.alive(t.site) && time.Since(t.site.knocked) > s.cfg.OfflineAfter
			s.mu.Unlock()
			if gone {
				offline = true
				break wait
			}
		}
	}
	s.mu.Lock()
	if t.state == taskAnswering || t.state == taskDone {
		// the answer is arriving: take it
		s.mu.Unlock()
		r := <-t.done
		return r, r.err
	}
	t.state = taskClosed
	s.closed[t.id] = t.round
	t.site.queue = slices.DeleteFunc(t.site.queue, func(q *task) bool { return q == t })
	s.mu.Unlock()
	if offline {
		s.log.Warn("site went offline (heartbeat missed): not waiting for its answer", "round", t.round, "site", t.site.name, "kind", t.kind.String())
		s.event(t.round, t.site.name, "offline", fmt.Sprintf("%s task given up: no contact for %s", t.kind, s.cfg.OfflineAfter))
		return taskResult{}, fmt.Errorf("site %q round %d %s: offline (no contact for %s)", t.site.name, t.round, t.kind, s.cfg.OfflineAfter)
	}
	s.log.Warn("round closed without the site's answer", "round", t.round, "site", t.site.name, "kind", t.kind.String())
	return taskResult{}, fmt.Errorf("site %q round %d %s: no answer: %w", t.site.name, t.round, t.kind, ctx.Err())
}
