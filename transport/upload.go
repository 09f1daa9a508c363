package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pfedmma/pfedmma/coordstore"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// UploadUpdate implements pb.FederationServer.
func (s *Server) UploadUpdate(stream grpc.ClientStreamingServer[pb.UpdateChunk, pb.UploadReply]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "first message of an upload must be its header")
	}
	if err := s.checkVersion(h.ProtocolVersion, h.Site); err != nil {
		return err
	}
	st, err := s.caller(stream.Context(), h.Site)
	if err != nil {
		return err
	}
	round := int(h.Round)
	t, rf := s.claim(st, h.TaskId, round, pb.TaskKind_TASK_KIND_FIT)
	if rf != nil {
		s.refused(st, round, h.TaskId, rf)
		return stream.SendAndClose(&pb.UploadReply{Reason: rf.code + ": " + rf.msg})
	}
	params, n, rf := s.receive(stream, h)
	if rf == nil {
		rf = s.checkDeclared(st, h.NumExamples)
	}
	if rf == nil {
		rf = s.revokedRefusal(st)
	}
	if rf != nil {
		s.refused(st, round, h.TaskId, rf)
		s.finish(t, taskResult{err: fmt.Errorf("site %q round %d: upload refused: %s", st.name, round, rf.msg)})
		return stream.SendAndClose(&pb.UploadReply{Reason: rf.code + ": " + rf.msg})
	}
	if rf, fatal := s.record(st, t, h.TaskId, "upload", coordstore.Update{TaskID: t.id, Round: round, Site: st.name, Kind: "fit",
		NumExamples: int(h.NumExamples), Bytes: n, SHA256: hexSum(h.Params.GetSha256())}); rf != nil {
		if fatal != nil {
			defer s.storageFailed(fatal)
		}
		return stream.SendAndClose(&pb.UploadReply{Reason: rf.code + ": " + rf.msg})
	}
	if rf := s.finishUnlessRevoked(t, taskResult{fit: federation.FitRes{Params: params, NumExamples: int(h.NumExamples), Metrics: h.Metrics}}); rf != nil {
		s.refused(st, round, h.TaskId, rf)
		s.finish(t, taskResult{err: fmt.Errorf("site %q round %d: upload refused: %s", st.name, round, rf.msg)})
		return stream.SendAndClose(&pb.UploadReply{Reason: rf.code + ": " + rf.msg})
	}
	s.metrics.WireIn.Add(float64(n))
	s.log.Info("update accepted", "round", round, "site", st.name, "task", t.id, "bytes", n, "num_examples", h.NumExamples)
	return stream.SendAndClose(&pb.UploadReply{Accepted: true})
}

// record stores claimed task t's answer u (what: "upload" or "evaluation")
// in the coordinator's store, if it has one, before the answer is settled.
// A replay or a storage failure refuses the answer and settles t with the
// refusal; a storage failure is also logged and returned as fatal, for the
// caller to pass to storageFailed once its reply is sent.
func (s *Server) record(st *siteState, t *task, taskID, what string, u coordstore.Update) (rf *refusal, fatal error) {
	if s.cfg.Store == nil {
		return nil, nil
	}
	err := s.cfg.Store.RecordUpdate(u)
	if err == nil {
		return nil, nil
	}
	rf = refuse(ReasonReplay, "%v", err)
	if !errors.Is(err, coordstore.ErrReplay) {
		s.log.Error("coordinator storage error: "+what+" not recorded", "round", u.Round, "site", st.name, "err", err)
		rf = refuse(ReasonCoordinator, "coordinator error: the %s could not be recorded", what)
		fatal = err
	}
	s.refused(st, u.Round, taskID, rf)
	s.finish(t, taskResult{err: fmt.Errorf("site %q round %d: %s", st.name, u.Round, rf.msg)})
	return rf, fatal
}

// ReasonRevoked counts answers refused because their site was revoked
// while it sent them.
const ReasonRevoked = "revoked"

// revokedRefusal refuses an answer of st when st is revoked by now (nil
// when it is not).
func (s *Server) revokedRefusal(st *siteState) *refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.revoked {
		return refuse(ReasonRevoked, "site %q was revoked while it answered: its answer is discarded", st.name)
	}
	return nil
}

// finishUnlessRevoked settles claimed task t with res, the site's answer,
// unless the site is revoked by now: the check and the settling are one
// step under s.mu, the lock Revoke takes, so an answer is either accepted
// before the revocation or discarded (the refusal returned).
func (s *Server) finishUnlessRevoked(t *task, res taskResult) *refusal {
	if !s.settle(t, res, true) {
		return refuse(ReasonRevoked, "site %q was revoked while it answered: its answer is discarded", t.site.name)
	}
	return nil
}

// receive reads an upload's chunks and validates the tensors.
func (s *Server) receive(stream grpc.ClientStreamingServer[pb.UpdateChunk, pb.UploadReply], h *pb.UpdateHeader) (tensor.Named, int64, *refusal) {
	if h.NumExamples < s.lim.MinExamples || h.NumExamples > s.lim.MaxExamples {
		return nil, 0, refuse(ReasonExamples, "example count %d outside [%d, %d]", h.NumExamples, s.lim.MinExamples, s.lim.MaxExamples)
	}
	for k, v := range h.Metrics {
		if v != v {
			return nil, 0, refuse(ReasonMetrics, "metric %q is NaN", k)
		}
	}
	size := h.Params.GetSize()
	if size < 0 || size > s.lim.MaxUploadBytes {
		return nil, 0, refuse(ReasonTooLarge, "upload of %d bytes, limit %d", size, s.lim.MaxUploadBytes)
	}
	data := make([]byte, 0, size)
	for {
		c, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, refuse(ReasonMalformed, "upload broken off: %v", err)
		}
		d := c.GetData()
		if c.GetHeader() != nil || int64(len(data)+len(d)) > size {
			return nil, 0, refuse(ReasonMalformed, "upload holds more than the %d declared bytes", size)
		}
		data = append(data, d...)
	}
	if rf := s.checkCompression(h.Params); rf != nil {
		return nil, 0, rf
	}
	params, rf := decodeBlob(data, h.Params, s.cfg.Spec, s.lim)
	if rf != nil {
		return nil, 0, rf
	}
	return params, int64(len(data)), nil
}

// ReportEval implements pb.FederationServer.
func (s *Server) ReportEval(ctx context.Context, req *pb.EvalReport) (*pb.UploadReply, error) {
	if err := s.checkVersion(req.ProtocolVersion, req.Site); err != nil {
		return nil, err
	}
	st, err := s.caller(ctx, req.Site)
	if err != nil {
		return nil, err
	}
	round := int(req.Round)
	t, rf := s.claim(st, req.TaskId, round, pb.TaskKind_TASK_KIND_EVALUATE)
	if rf != nil {
		s.refused(st, round, req.TaskId, rf)
		return &pb.UploadReply{Reason: rf.code + ": " + rf.msg}, nil
	}
	if rf, fatal := s.record(st, t, req.TaskId, "evaluation",
		coordstore.Update{TaskID: t.id, Round: round, Site: st.name, Kind: "evaluate", NumExamples: int(req.NumExamples)}); rf != nil {
		if fatal != nil {
			defer s.storageFailed(fatal)
		}
		return &pb.UploadReply{Reason: rf.code + ": " + rf.msg}, nil
	}
	if rf := s.finishUnlessRevoked(t, taskResult{eval: federation.EvaluateRes{Metrics: req.Metrics, NumExamples: int(req.NumExamples)}}); rf != nil {
		s.refused(st, round, req.TaskId, rf)
		s.finish(t, taskResult{err: fmt.Errorf("site %q round %d: evaluation refused: %s", st.name, round, rf.msg)})
		return &pb.UploadReply{Reason: rf.code + ": " + rf.msg}, nil
	}
	s.log.Info("evaluation accepted", "round", round, "site", st.name, "task", t.id)
	return &pb.UploadReply{Accepted: true}, nil
}
