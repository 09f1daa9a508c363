package transport

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
)

// OverFile, in a site's state folder, records that the site learnt its
// federation ended (FederationOver): a site started again on that folder,
// for the same coordinator, does not wait for a coordinator that will not
// come back.
const OverFile = "federation-over.json"

// The ways a federation ends for a site (FederationOver.Ended).
const (
	// EndFinished: every round is done (or the coordinator, restarted on a
	// finished run, said so). A site started again exits 0.
	EndFinished = "finished"
	// EndStopped: the coordinator was stopped (SIGTERM) before its last
	// round; restarted with the same flags it resumes, so a site started
	// again waits for it.
	EndStopped = "stopped"
)

// FederationOver is what a site records when the coordinator tells it the
// federation ended: which coordinator (address and CA), how it ended and
// when.
type FederationOver struct {
	// Server is the coordinator's address as the site dialled it; CA the
	// SHA-256 of the certificates folder's ca.crt (empty with
	// --insecure-dev): together, the federation's identity.
	Server string `json:"server"`
	CA     string `json:"ca_sha256,omitempty"`
	Site   string `json:"site"`
	// Ended is EndFinished or EndStopped; Reason the coordinator's words
	// for a stop.
	Ended  string    `json:"ended"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Finished reports whether the federation ran to its end (not a stop).
func (o *FederationOver) Finished() bool { return o.Ended == EndFinished }

// caIdentity is the SHA-256 of cfg's CA certificate ("" with Insecure).
func (cfg SiteConfig) caIdentity() (string, error) {
	if cfg.Insecure {
		return "", nil
	}
	path := filepath.Join(cfg.CertsDir, certs.CAFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("site %q: --certs: %w", cfg.Name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// recordOver writes how the federation ended for site cfg.Name into
// cfg.StateDir/OverFile (nothing without a state folder).
func recordOver(cfg SiteConfig, ended, reason string) error {
	if cfg.StateDir == "" {
		return nil
	}
	ca, err := cfg.caIdentity()
	if err != nil {
		return err
	}
	o := FederationOver{Server: cfg.Addr, CA: ca, Site: cfg.Name, Ended: ended, Reason: reason, At: time.Now().UTC().Truncate(time.Second)}
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("site %q: --state %s: %w", cfg.Name, cfg.StateDir, err)
	}
	path := filepath.Join(cfg.StateDir, OverFile)
	if err := atomicfile.WriteBytes(path, append(b, '\n')); err != nil {
		return fmt.Errorf("site %q: recording the federation's end in %s: %w", cfg.Name, path, err)
	}
	return nil
}

// ReadOver returns how the federation of site cfg ended, as the site
// recorded it in cfg.StateDir/OverFile, when the record is of the same
// coordinator (address and CA) and site; nil when there is none or it is
// another federation's. A record that cannot be read is an error naming
// the file.
func ReadOver(cfg SiteConfig) (*FederationOver, error) {
	if cfg.StateDir == "" {
		return nil, nil
	}
	path := filepath.Join(cfg.StateDir, OverFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("site %q: --state: %w", cfg.Name, err)
	}
	var o FederationOver
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("site %q: %s: %w (remove the file: the site then asks the coordinator again)", cfg.Name, path, err)
	}
	if o.Ended != EndFinished && o.Ended != EndStopped {
		return nil, fmt.Errorf("site %q: %s: field ended %q: want %q or %q (remove the file: the site then asks the coordinator again)", cfg.Name, path, o.Ended, EndFinished, EndStopped)
	}
	ca, err := cfg.caIdentity()
	if err != nil {
		return nil, err
	}
	if o.Server != cfg.Addr || o.CA != ca || o.Site != cfg.Name {
		return nil, nil
	}
	return &o, nil
}
