package transport

import (
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pfedmma/pfedmma/transport/pb"
)

// GetTask implements pb.FederationServer.
func (s *Server) GetTask(req *pb.TaskRequest, stream grpc.ServerStreamingServer[pb.TaskChunk]) error {
	if err := s.checkVersion(req.ProtocolVersion, req.Site); err != nil {
		return err
	}
	st, err := s.caller(stream.Context(), req.Site)
	if err != nil {
		return err
	}
	timer := time.NewTimer(s.cfg.PollWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		var t *task
		for _, q := range st.queue {
			if q.state == taskPending {
				t = q
				break
			}
		}
		finished, wake, revoked, failure, stopped := s.finished, st.wake, st.revoked, s.failure, s.stopped
		if t == nil && finished {
			st.toldDone, st.state = true, "done"
		}
		if t != nil {
			st.state = map[pb.TaskKind]string{pb.TaskKind_TASK_KIND_FIT: "training", pb.TaskKind_TASK_KIND_EVALUATE: "evaluating"}[t.kind]
		}
		s.mu.Unlock()
		switch {
		case revoked:
			return status.Errorf(codes.PermissionDenied, "site %q is revoked", st.name)
		case t != nil:
			s.changed()
			return s.sendTask(stream, t)
		case finished:
			s.changed()
			h := &pb.TaskHeader{ProtocolVersion: ProtocolVersion, Kind: pb.TaskKind_TASK_KIND_DONE}
			if failure != "" {
				h.Config = map[string]string{FailureKey: failure}
			} else if stopped != "" {
				h.Config = map[string]string{StoppedKey: stopped}
			}
			return stream.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Header{Header: h}})
		}
		select {
		case <-wake:
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-timer.C:
			return stream.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Header{Header: &pb.TaskHeader{ProtocolVersion: ProtocolVersion, Kind: pb.TaskKind_TASK_KIND_NONE}}})
		}
	}
}

func (s *Server) sendTask(stream grpc.ServerStreamingServer[pb.TaskChunk], t *task) error {
	h := &pb.TaskHeader{ProtocolVersion: ProtocolVersion, TaskId: t.id, Round: int64(t.round), Kind: t.kind, Config: t.config, Params: t.blob,
		UploadCompression: s.uploadCompression()}
	if err := stream.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Header{Header: h}}); err != nil {
		return err
	}
	if t.kind == pb.TaskKind_TASK_KIND_FIT || t.kind == pb.TaskKind_TASK_KIND_EVALUATE {
		for _, c := range chunks(t.data) {
			if err := stream.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Data{Data: c}}); err != nil {
				return err
			}
		}
		s.metrics.WireOut.Add(float64(len(t.data)))
	}
	s.log.Debug("task sent", "round", t.round, "site", t.site.name, "kind", t.kind.String(), "bytes", len(t.data))
	return nil
}

// claim finds the pending task an answer is for and marks it answering, or
// says why the answer is refused.
func (s *Server) claim(st *siteState, taskID string, round int, kind pb.TaskKind) (*task, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answered[taskID] {
		return nil, refuse(ReasonReplay, "task %s was already answered (replayed upload)", taskID)
	}
	if r, ok := s.closed[taskID]; ok {
		return nil, refuse(ReasonRoundClosed, "round %d is closed; late upload refused", r)
	}
	var t *task
	for _, site := range s.sites {
		for _, q := range site.queue {
			if q.id == taskID {
				t = q
			}
		}
	}
	switch {
	case t == nil:
		return nil, refuse(ReasonUnknownTask, "unknown task %s (from before a coordinator restart?); ask for the current task", taskID)
	case t.site != st:
		return nil, refuse(ReasonWrongSite, "task %s belongs to site %q", taskID, t.site.name)
	case t.kind != kind:
		return nil, refuse(ReasonTaskMismatch, "task %s is a %s task", taskID, t.kind)
	case t.round != round:
		return nil, refuse(ReasonWrongRound, "task %s is for round %d, upload says round %d", taskID, t.round, round)
	case t.state == taskAnswering:
		return nil, refuse(ReasonReplay, "task %s is being answered (duplicate upload)", taskID)
	}
	t.state = taskAnswering
	return t, nil
}

// finish settles a claimed task with its result (or refusal).
func (s *Server) finish(t *task, res taskResult) {
	s.settle(t, res, false)
}

// settle marks claimed task t answered, takes it off its site's queue and
// hands res to the proxy waiting for it. With unlessRevoked it does none of
// that, and reports false, when t's site is revoked by now (checked under
// the same hold of s.mu).
func (s *Server) settle(t *task, res taskResult, unlessRevoked bool) bool {
	s.mu.Lock()
	if unlessRevoked && t.site.revoked {
		s.mu.Unlock()
		return false
	}
	t.state = taskDone
	s.answered[t.id] = true
	t.site.queue = slices.DeleteFunc(t.site.queue, func(q *task) bool { return q == t })
	if !t.site.revoked {
		// a site revoked while it answered stays "revoked": a refusal
		// settled after the revocation must not make it look idle
		t.site.state = "idle"
	}
	s.mu.Unlock()
	t.done <- res
	s.changed()
	return true
}

func (s *Server) refused(st *siteState, round int, taskID string, r *refusal) {
	s.metrics.Refused.WithLabelValues(r.code).Inc()
	s.siteRefused(st, round, r)
	s.log.Warn("upload refused", "round", round, "site", st.name, "task", taskID, "reason", r.code, "detail", r.msg)
	if s.cfg.Store != nil {
		if err := s.cfg.Store.RecordRefusal(round, st.name, taskID, r.code+": "+r.msg); err != nil {
			s.log.Error("refusal not recorded", "round", round, "site", st.name, "err", err)
		}
	}
}
