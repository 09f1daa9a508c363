// Package coordstore keeps a networked coordinator's state in an embedded
// SQLite database (modernc.org/sqlite, pure Go) in write-ahead-log mode with
// full synchronisation: every event is one committed transaction, so a
// coordinator killed at any point finds, on restart, the state after its
// last complete event.
//
// Tables:
//
//	checkpoint  the federation.Checkpoint after the latest round (one row)
//	rounds      one RoundReport per completed round, written with the
//	            checkpoint in one transaction
//	updates     every accepted upload or evaluation (task ID, round, site,
//	            size, SHA-256); a task ID is accepted once, which refuses
//	            replays even across restarts
//	refusals    every refused upload with its reason
//	sites       the site registry: client ID, declared example count, last
//	            contact, state
//	events      a journal of everything else worth a line
package coordstore

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// Store is an open coordinator state database. It implements
// federation.CheckpointStore. Its methods are safe for concurrent use.
type Store struct {
	db   *sql.DB
	path string
}

const schema = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoint (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	next_round INTEGER NOT NULL,
	meta TEXT NOT NULL,
	strategy_state BLOB NOT NULL,
	saved_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds (round INTEGER PRIMARY KEY, report TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS updates (
	task_id TEXT PRIMARY KEY,
	round INTEGER NOT NULL,
	site TEXT NOT NULL,
	kind TEXT NOT NULL,
	num_examples INTEGER NOT NULL,
	bytes INTEGER NOT NULL,
	sha256 TEXT NOT NULL,
	at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refusals (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	round INTEGER NOT NULL,
	site TEXT NOT NULL,
	task_id TEXT NOT NULL,
	reason TEXT NOT NULL,
	at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sites (
	name TEXT PRIMARY KEY,
	client_id INTEGER NOT NULL,
	num_examples INTEGER NOT NULL,
	last_contact TEXT NOT NULL,
	state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	at TEXT NOT NULL,
	round INTEGER NOT NULL,
	site TEXT NOT NULL,
	kind TEXT NOT NULL,
	message TEXT NOT NULL);
`

// schemaVersion is recorded in meta; a database of another version is
// refused.
const schemaVersion = "pfedmma-coordstore/1"

// Open opens (creating when needed) the database at path.
func Open(path string) (*Store, error) {
	if err := checkAccess(path); err != nil {
		return nil, fmt.Errorf("coordstore: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("coordstore %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("coordstore %s: schema: %w", path, err)
	}
	var v string
	err = db.QueryRow(`SELECT value FROM meta WHERE key = 'schema'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := db.Exec(`INSERT INTO meta(key, value) VALUES ('schema', ?)`, schemaVersion); err != nil {
			db.Close()
			return nil, fmt.Errorf("coordstore %s: %w", path, err)
		}
	case err != nil:
		db.Close()
		return nil, fmt.Errorf("coordstore %s: %w", path, err)
	case v != schemaVersion:
		db.Close()
		return nil, fmt.Errorf("coordstore %s: schema %q, want %q", path, v, schemaVersion)
	}
	return &Store{db: db, path: path}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// ckptMeta is the checkpoint without its tensors, stored as JSON.
type ckptMeta struct {
	NextRound int                `json:"next_round"`
	Strategy  string             `json:"strategy"`
	Seed      uint64             `json:"seed"`
	Fraction  float64            `json:"fraction"`
	Sampler   []byte             `json:"sampler"`
	History   federation.History `json:"history"`
	Clients   []int              `json:"clients"`
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// Save implements federation.CheckpointStore: the checkpoint and the report
// of its newest round are committed in one transaction.
func (s *Store) Save(c *federation.Checkpoint) error {
	meta, err := json.Marshal(ckptMeta{c.NextRound, c.Strategy, c.Seed, c.Fraction, c.Sampler, c.History, c.Clients})
	if err != nil {
		return fmt.Errorf("coordstore %s: checkpoint: %w", s.path, err)
	}
	var st bytes.Buffer
	if err := safetensors.Encode(&st, c.StrategyState, nil, nil); err != nil {
		return fmt.Errorf("coordstore %s: strategy state: %w", s.path, err)
	}
	tx, err := s.db.Begin()
	if err != nil {
		return fmt.Errorf("coordstore %s: %w", s.path, err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO checkpoint(id, next_round, meta, strategy_state, saved_at) VALUES (1, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET next_round = excluded.next_round, meta = excluded.meta,
		strategy_state = excluded.strategy_state, saved_at = excluded.saved_at`,
		c.NextRound, string(meta), st.Bytes(), now()); err != nil {
		return fmt.Errorf("coordstore %s: checkpoint: %w", s.path, err)
	}
	if n := len(c.History.Rounds); n > 0 {
		rep := c.History.Rounds[n-1]
		js, err := json.Marshal(rep)
		if err != nil {
			return fmt.Errorf("coordstore %s: round %d report: %w", s.path, rep.Round, err)
		}
		if _, err := tx.Exec(`INSERT OR REPLACE INTO rounds(round, report) VALUES (?, ?)`, rep.Round, string(js)); err != nil {
			return fmt.Errorf("coordstore %s: round %d report: %w", s.path, rep.Round, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("coordstore %s: checkpoint: %w", s.path, err)
	}
	return nil
}

// Load implements federation.CheckpointStore.
func (s *Store) Load() (*federation.Checkpoint, error) {
	var meta string
	var st []byte
	err := s.db.QueryRow(`SELECT meta, strategy_state FROM checkpoint WHERE id = 1`).Scan(&meta, &st)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("coordstore %s: %w", s.path, federation.ErrNoCheckpoint)
	}
	if err != nil {
		return nil, fmt.Errorf("coordstore %s: checkpoint: %w", s.path, err)
	}
	var m ckptMeta
	if err := json.Unmarshal([]byte(meta), &m); err != nil {
		return nil, fmt.Errorf("coordstore %s: checkpoint meta: %w", s.path, err)
	}
	f, err := safetensors.Parse(st, s.path+": strategy_state")
	if err != nil {
		return nil, fmt.Errorf("coordstore %s: %w", s.path, err)
	}
	state, err := f.Float32All()
	if err != nil {
		return nil, fmt.Errorf("coordstore %s: %w", s.path, err)
	}
	if state == nil {
		state = tensor.Named{}
	}
	return &federation.Checkpoint{
		NextRound: m.NextRound, Strategy: m.Strategy, Seed: m.Seed, Fraction: m.Fraction,
		Sampler: m.Sampler, History: m.History, Clients: m.Clients, StrategyState: state,
	}, nil
}

// Rounds returns the stored round reports in round order.
func (s *Store) Rounds() ([]federation.RoundReport, error) {
	rows, err := s.db.Query(`SELECT report FROM rounds ORDER BY round`)
	if err != nil {
		return nil, fmt.Errorf("coordstore %s: rounds: %w", s.path, err)
	}
	defer rows.Close()
	var out []federation.RoundReport
	for rows.Next() {
		var js string
		if err := rows.Scan(&js); err != nil {
			return nil, fmt.Errorf("coordstore %s: rounds: %w", s.path, err)
		}
		var r federation.RoundReport
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			return nil, fmt.Errorf("coordstore %s: rounds: %w", s.path, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Update is one accepted upload or evaluation report.
type Update struct {
	TaskID      string
	Round       int
	Site        string
	Kind        string // "fit" or "evaluate"
	NumExamples int
	Bytes       int64
	SHA256      string
}

// ErrReplay is returned (wrapped) by RecordUpdate for a task ID that was
// already accepted.
var ErrReplay = errors.New("replayed upload")

// RecordUpdate commits an accepted update; a task ID already recorded gives
// an error wrapping ErrReplay.
func (s *Store) RecordUpdate(u Update) error {
	res, err := s.db.Exec(`INSERT INTO updates(task_id, round, site, kind, num_examples, bytes, sha256, at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(task_id) DO NOTHING`,
		u.TaskID, u.Round, u.Site, u.Kind, u.NumExamples, u.Bytes, u.SHA256, now())
	if err != nil {
		return fmt.Errorf("coordstore %s: update %s: %w", s.path, u.TaskID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("coordstore %s: task %s: %w", s.path, u.TaskID, ErrReplay)
	}
	return nil
}

// Updates returns the number of accepted updates of a round and kind.
func (s *Store) Updates(round int, kind string) (int, error) {
	var n int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM updates WHERE round = ? AND kind = ?`, round, kind).Scan(&n); err != nil {
		return 0, fmt.Errorf("coordstore %s: updates: %w", s.path, err)
	}
	return n, nil
}

// RecordRefusal commits a refused upload and its reason.
func (s *Store) RecordRefusal(round int, site, taskID, reason string) error {
	if _, err := s.db.Exec(`INSERT INTO refusals(round, site, task_id, reason, at) VALUES (?, ?, ?, ?, ?)`,
		round, site, taskID, reason, now()); err != nil {
		return fmt.Errorf("coordstore %s: refusal: %w", s.path, err)
	}
	return nil
}

// Refusals returns the reasons of all refused uploads, oldest first.
func (s *Store) Refusals() ([]string, error) {
	rows, err := s.db.Query(`SELECT reason FROM refusals ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("coordstore %s: refusals: %w", s.path, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, fmt.Errorf("coordstore %s: refusals: %w", s.path, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// SiteRecord is one row of the site registry.
type SiteRecord struct {
	Name        string
	ClientID    int
	NumExamples int
	LastContact time.Time
	State       string
}

// PutSite inserts or replaces a site's registry row.
func (s *Store) PutSite(r SiteRecord) error {
	if _, err := s.db.Exec(`INSERT OR REPLACE INTO sites(name, client_id, num_examples, last_contact, state) VALUES (?, ?, ?, ?, ?)`,
		r.Name, r.ClientID, r.NumExamples, r.LastContact.UTC().Format(time.RFC3339Nano), r.State); err != nil {
		return fmt.Errorf("coordstore %s: site %q: %w", s.path, r.Name, err)
	}
	return nil
}

// Sites returns the site registry ordered by client ID.
func (s *Store) Sites() ([]SiteRecord, error) {
	rows, err := s.db.Query(`SELECT name, client_id, num_examples, last_contact, state FROM sites ORDER BY client_id`)
	if err != nil {
		return nil, fmt.Errorf("coordstore %s: sites: %w", s.path, err)
	}
	defer rows.Close()
	var out []SiteRecord
	for rows.Next() {
		var r SiteRecord
		var at string
		if err := rows.Scan(&r.Name, &r.ClientID, &r.NumExamples, &at, &r.State); err != nil {
			return nil, fmt.Errorf("coordstore %s: sites: %w", s.path, err)
		}
		r.LastContact, _ = time.Parse(time.RFC3339Nano, at)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Event appends a line to the event journal.
func (s *Store) Event(round int, site, kind, msg string) error {
	if _, err := s.db.Exec(`INSERT INTO events(at, round, site, kind, message) VALUES (?, ?, ?, ?, ?)`,
		now(), round, site, kind, msg); err != nil {
		return fmt.Errorf("coordstore %s: event: %w", s.path, err)
	}
	return nil
}

// Events returns the number of journal lines of a kind.
func (s *Store) Events(kind string) (int, error) {
	var n int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM events WHERE kind = ?`, kind).Scan(&n); err != nil {
		return 0, fmt.Errorf("coordstore %s: events: %w", s.path, err)
	}
	return n, nil
}
