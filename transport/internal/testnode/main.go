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
	role := flag.String("role", "", "coord or site")
	dir := flag.String("certs", "", "certificates folder")
	state := flag.String("state", "", "state database (coord) or folder (site)")
	addr := flag.String("addr", "127.0.0.1:0", "listen (coord) or coordinator (site) address")
	addrFile := flag.String("addr-file", "", "coord: write the bound address here")
	site := flag.String("site", "", "site name")
	rounds := flag.Int("rounds", 6, "rounds")
	fraction := flag.Float64("fraction", 1, "fraction of sites per round")
	seed := flag.Uint64("seed", 7, "sampler seed")
	delay := flag.Duration("delay", 0, "site: extra time per fit")
	timeout := flag.Duration("round-timeout", 0, "coord: round deadline")
	tolerate := flag.Bool("tolerate", false, "coord: tolerate failed sites without a deadline (as serve does; implied by -round-timeout)")
	minFit := flag.Int("min-fit", 1, "coord: fewest answers that close a round")
	retryEvery := flag.Duration("retry-every", 0, "coord: log interval of a round below -min-fit")
	offlineAfter := flag.Duration("offline-after", 0, "coord: no contact for this long makes a site offline")
	registerTimeout := flag.Duration("register-timeout", 0, "coord: start after this long with the sites there")
	settings := flag.String("settings", "", "coord and site: resolved configuration, k=v,k=v")
	grace := flag.Duration("duplicate-grace", 0, "site: give up after this long refused as a second session")
	fullDisk := flag.Int("full-disk-after-round", -1, "coord: after this round, writes past the state database's current size fail (RLIMIT_FSIZE)")
	secure := flag.Bool("secure", false, "coord: secure aggregation")
	stall := flag.Int("stall-after-share", -1, "site: stall (to be killed) after sharing its keys in this round")
	fetch := flag.Bool("fetch-task", false, "site: fetch the task before registering, as pfedmma site does (coord: send one)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var sets []string
	if *settings != "" {
		sets = strings.Split(*settings, ",")
	}
	switch *role {
	case "coord":
		strat := toy.Strategy()
		sites, err := certs.Sites(*dir)
		if err != nil {
			fail(err)
		}
		coord := &federation.Coordinator{Strategy: strat, Rounds: *rounds, Fraction: *fraction, Seed: *seed,
			Parallel: len(sites), RoundTimeout: *timeout, TolerateFailures: *tolerate || *timeout > 0, MinFit: *minFit,
			RetryEvery: *retryEvery, Logger: log}
		if *secure {
			coord.Secure = &federation.SimulatedSecure{Quant: secagg.Quantizer{Clip: secagg.DefaultClip, ScaleBits: secagg.DefaultScaleBits}}
		}
		coord.OnRound = func(rep federation.RoundReport) error {
			js, _ := json.Marshal(map[string]any{"round": rep.Round, "participants": rep.Participants, "absent": rep.Absent, "failures": rep.Failures})
			fmt.Printf("ROUND %s\n", js)
			if rep.Round == *fullDisk {
				diskFull(*state)
			}
			return nil
		}
		_, err = transport.RunCoordinator(ctx, transport.CoordinatorConfig{Addr: *addr, CertsDir: *dir, StatePath: *state,
			Spec: toy.Spec(), PollWait: time.Second, Heartbeat: 300 * time.Millisecond, OfflineAfter: *offlineAfter,
			RegisterTimeout: *registerTimeout, Settings: sets, Linger: 3 * time.Second, Logger: log, Task: toyTask(*fetch),
			Ready: func(g, _ string, _ *transport.Server) {
				if *addrFile != "" {
					os.WriteFile(*addrFile+".tmp", []byte(g), 0o644)
					os.Rename(*addrFile+".tmp", *addrFile)
				}
			}}, coord)
		if err != nil {
			fail(err)
		}
		js, _ := json.Marshal(strat.Global())
		fmt.Printf("FINAL %s\n", js)
	case "site":
		id, err := certs.SiteID(*dir, *site)
		if err != nil {
			fail(err)
		}
		c := toy.New(id)
		c.Delay = *delay
		hook := func(step string, round int) {
			if step == "SEC_AGG_STEP_SHARE" && round == *stall {
				log.Info("stalling after key sharing", "round", round)
				<-ctx.Done()
			}
		}
		sc := transport.SiteConfig{Addr: *addr, CertsDir: *dir, Name: *site, StateDir: *state,
			MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Settings: sets, DuplicateGrace: *grace, Logger: log, SecAggHook: hook}
		if *fetch {
			if _, err := transport.FetchTask(ctx, sc, id, nil); err != nil {
				fail(err)
			}
			log.Info("task fetched", "site", *site)
		}
		if err := transport.RunSite(ctx, sc, c); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("-role must be coord or site"))
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
