package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/pfedmma/pfedmma/federation"
)

// ErrCoordinatorStorage marks a run that stopped because the coordinator's
// own storage (its state database: a full disk, a read-only folder) failed.
// It is the coordinator's error, never a site's: the sites are told that
// the coordinator failed, without the database's path.
var ErrCoordinatorStorage = errors.New("the coordinator's storage failed")

// storageFailed records the first storage error and stops the run (the
// context of RunCoordinator): a write that failed may not be skipped,
// since the run must be resumable from what is stored.
func (s *Server) storageFailed(err error) {
	s.mu.Lock()
	if s.storageErr == nil {
		s.storageErr = err
	}
	stop := s.stopRun
	s.mu.Unlock()
	if stop != nil {
		stop(fmt.Errorf("%w: %w", ErrCoordinatorStorage, err))
	}
}

// StorageErr returns the first error of the coordinator's storage, or nil.
func (s *Server) StorageErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.storageErr
}

// withStorageStop returns a context that storageFailed cancels.
func (s *Server) withStorageStop(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	s.stopRun = cancel
	s.mu.Unlock()
	return ctx, func() { cancel(nil) }
}

// storageResult turns the end of a run whose storage failed into
// ErrCoordinatorStorage (whatever the coordinator returned: a cancelled
// round, a failed checkpoint), and leaves other ends as they are.
func (s *Server) storageResult(err error) error {
	if serr := s.StorageErr(); serr != nil {
		return fmt.Errorf("%w: %w (nothing after the last saved round is lost: restart the coordinator with the same flags once the disk is fixed)", ErrCoordinatorStorage, serr)
	}
	return err
}

// checkpointStore is the coordinator's federation.CheckpointStore whose
// failed saves count as storage failures.
type checkpointStore struct {
	federation.CheckpointStore
	s *Server
}

// Save implements federation.CheckpointStore.
func (c checkpointStore) Save(ck *federation.Checkpoint) error {
	err := c.CheckpointStore.Save(ck)
	if err != nil {
		c.s.storageFailed(err)
	}
	return err
}
