// Command testnode runs a toy coordinator or site over the transport, for
// the fault tests (kill -9 of real processes, dead, duplicate or revoked
// sites, a full disk) and load runs.
//
//	testnode -role coord -certs D -state S -addr-file F [-rounds R ...]
//	testnode -role site -certs D -site NAME -addr HOST:PORT -state DIR
//
// The coordinator writes its gRPC address to -addr-file once it listens,
// prints "ROUND <json>" (round, participants, absent, failures) after every
// round and "FINAL <json of the global tensors>" on success.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/secagg"
	"github.com/pfedmma/pfedmma/transport"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

func main() {
	f := parseFlags()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var sets []string
	if *f.settings != "" {
		sets = strings.Split(*f.settings, ",")
	}
	switch *f.role {
	case "coord":
		runCoord(ctx, f, sets, log)
	case "site":
		runSite(ctx, f, sets, log)
	default:
		fail(fmt.Errorf("-role must be coord or site"))
	}
}

// nodeFlags are the command line of a test node.
type nodeFlags struct {
	role            *string
	dir             *string
	state           *string
	addr            *string
	addrFile        *string
	site            *string
	rounds          *int
	fraction        *float64
	seed            *uint64
	delay           *time.Duration
	timeout         *time.Duration
	tolerate        *bool
	minFit          *int
	retryEvery      *time.Duration
	offlineAfter    *time.Duration
	registerTimeout *time.Duration
	settings        *string
	grace           *time.Duration
	fullDisk        *int
	secure          *bool
	stall           *int
	fetch           *bool
}

// parseFlags defines and parses the flags.
func parseFlags() nodeFlags {
	var f nodeFlags
	f.role = flag.String("role", "", "coord or site")
	f.dir = flag.String("certs", "", "certificates folder")
	f.state = flag.String("state", "", "state database (coord) or folder (site)")
	f.addr = flag.String("addr", "127.0.0.1:0", "listen (coord) or coordinator (site) address")
	f.addrFile = flag.String("addr-file", "", "coord: write the bound address here")
	f.site = flag.String("site", "", "site name")
	f.rounds = flag.Int("rounds", 6, "rounds")
	f.fraction = flag.Float64("fraction", 1, "fraction of sites per round")
	f.seed = flag.Uint64("seed", 7, "sampler seed")
	f.delay = flag.Duration("delay", 0, "site: extra time per fit")
	f.timeout = flag.Duration("round-timeout", 0, "coord: round deadline")
	f.tolerate = flag.Bool("tolerate", false, "coord: tolerate failed sites without a deadline (as serve does; implied by -round-timeout)")
	f.minFit = flag.Int("min-fit", 1, "coord: fewest answers that close a round")
	f.retryEvery = flag.Duration("retry-every", 0, "coord: log interval of a round below -min-fit")
	f.offlineAfter = flag.Duration("offline-after", 0, "coord: no contact for this long makes a site offline")
	f.registerTimeout = flag.Duration("register-timeout", 0, "coord: start after this long with the sites there")
	f.settings = flag.String("settings", "", "coord and site: resolved configuration, k=v,k=v")
	f.grace = flag.Duration("duplicate-grace", 0, "site: give up after this long refused as a second session")
	f.fullDisk = flag.Int("full-disk-after-round", -1, "coord: after this round, writes past the state database's current size fail (RLIMIT_FSIZE)")
	f.secure = flag.Bool("secure", false, "coord: secure aggregation")
	f.stall = flag.Int("stall-after-share", -1, "site: stall (to be killed) after sharing its keys in this round")
	f.fetch = flag.Bool("fetch-task", false, "site: fetch the task before registering, as pfedmma site does (coord: send one)")
	flag.Parse()
	return f
}

// runCoord coordinates the toy federation and prints each round and the
// final global model.
func runCoord(ctx context.Context, f nodeFlags, sets []string, log *slog.Logger) {
	strat := toy.Strategy()
	sites, err := certs.Sites(*f.dir)
	if err != nil {
		fail(err)
	}
	coord := &federation.Coordinator{Strategy: strat, Rounds: *f.rounds, Fraction: *f.fraction, Seed: *f.seed,
		Parallel: len(sites), RoundTimeout: *f.timeout, TolerateFailures: *f.tolerate || *f.timeout > 0, MinFit: *f.minFit,
		RetryEvery: *f.retryEvery, Logger: log}
	if *f.secure {
		coord.Secure = &federation.SimulatedSecure{Quant: secagg.Quantizer{Clip: secagg.DefaultClip, ScaleBits: secagg.DefaultScaleBits}}
	}
	coord.OnRound = func(rep federation.RoundReport) error {
		js, _ := json.Marshal(map[string]any{"round": rep.Round, "participants": rep.Participants, "absent": rep.Absent, "failures": rep.Failures})
		fmt.Printf("ROUND %s\n", js)
		if rep.Round == *f.fullDisk {
			diskFull(*f.state)
		}
		return nil
	}
	_, err = transport.RunCoordinator(ctx, transport.CoordinatorConfig{Addr: *f.addr, CertsDir: *f.dir, StatePath: *f.state,
		Spec: toy.Spec(), PollWait: time.Second, Heartbeat: 300 * time.Millisecond, OfflineAfter: *f.offlineAfter,
		RegisterTimeout: *f.registerTimeout, Settings: sets, Linger: 3 * time.Second, Logger: log, Task: toyTask(*f.fetch),
		Ready: func(g, _ string, _ *transport.Server) {
			if *f.addrFile != "" {
				os.WriteFile(*f.addrFile+".tmp", []byte(g), 0o644)
				os.Rename(*f.addrFile+".tmp", *f.addrFile)
			}
		}}, coord)
	if err != nil {
		fail(err)
	}
	js, _ := json.Marshal(strat.Global())
	fmt.Printf("FINAL %s\n", js)
}

// runSite runs one toy site.
func runSite(ctx context.Context, f nodeFlags, sets []string, log *slog.Logger) {
	id, err := certs.SiteID(*f.dir, *f.site)
	if err != nil {
		fail(err)
	}
	c := toy.New(id)
	c.Delay = *f.delay
	hook := func(step string, round int) {
		if step == "SEC_AGG_STEP_SHARE" && round == *f.stall {
			log.Info("stalling after key sharing", "round", round)
			<-ctx.Done()
		}
	}
	sc := transport.SiteConfig{Addr: *f.addr, CertsDir: *f.dir, Name: *f.site, StateDir: *f.state,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Settings: sets, DuplicateGrace: *f.grace, Logger: log, SecAggHook: hook}
	if *f.fetch {
		if _, err := transport.FetchTask(ctx, sc, id, nil); err != nil {
			fail(err)
		}
		log.Info("task fetched", "site", *f.site)
	}
	if err := transport.RunSite(ctx, sc, c); err != nil {
		fail(err)
	}
}

// toyTask is the task the coordinator sends with -fetch-task (nil
// without).
func toyTask(on bool) *transport.Task {
	if !on {
		return nil
	}
	return &transport.Task{Experiment: []byte("toy: true\n"), ModelSHA256: strings.Repeat("0", 64), VocabSHA256: strings.Repeat("0", 64), Fingerprint: strings.Repeat("0", 64), UploadBytes: 8}
}

// diskFull makes every later write past the current end of the state
// database's write-ahead log fail with EFBIG, as on a full disk:
// RLIMIT_FSIZE at its size (SIGXFSZ ignored, so that the writes fail
// instead of killing the process). The event log beside it fails too once
// it reaches that size.
func diskFull(statePath string) {
	fi, err := os.Stat(statePath + "-wal")
	if err != nil {
		fail(fmt.Errorf("full disk: %w", err))
	}
	limit := uint64(fi.Size())
	signal.Ignore(syscall.SIGXFSZ)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "testnode: the disk is full now (RLIMIT_FSIZE %d)\n", limit)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "testnode:", err)
	os.Exit(1)
}
