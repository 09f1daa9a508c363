package secagg

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchLength is pFedMMA's shared part in the paper's setting: r = 32,
// blocks 10–12 of ViT-B/16, a 32×32 projection and its bias per block.
const benchLength = 3 * (32*32 + 32)

// BenchmarkRound runs one whole round in memory (every site's and the
// server's work, on one thread) and reports the CPU time of a site (mean
// over the sites) and of the server, measured on the thread (so that a
// shared machine's load does not count), and the bytes each site sends
// and receives on the wire (the encodings of wire.go).
func BenchmarkRound(b *testing.B) {
	for _, tc := range []struct {
		n, degree, drops int
	}{{10, 0, 0}, {10, 0, 3}, {100, 0, 0}, {100, 0, 30}, {100, 16, 0}} {
		name := fmt.Sprintf("sites=%d/degree=%d/dropped=%d", tc.n, tc.degree, tc.drops)
		b.Run(name, func(b *testing.B) {
			cfg, err := NewConfig(session(name), sites(tc.n), benchLength, Options{Degree: tc.degree})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			xs, ws := inputs(rng, cfg.Sites, benchLength, 0.1)
			drop := map[int]bool{}
			for _, p := range rng.Perm(tc.n)[:tc.drops] {
				drop[cfg.Sites[p]] = true
			}
			// sites as in a federation: signed keys (ECDSA P-256
			// certificates) checked against the CA and the site list
			names := make([]string, cfg.Sites[len(cfg.Sites)-1]+1)
			for _, id := range cfg.Sites {
				names[id] = fmt.Sprintf("site-%d", id)
			}
			p := newPKI(b, names...)
			var up, down int
			var site, server time.Duration
			for b.Loop() {
				r := &round{cfg: cfg, srv: NewServer(cfg), clients: map[int]*Client{}}
				for _, id := range cfg.Sites {
					r.clients[id], _ = NewClient(cfg, id, nil)
					if err := r.clients[id].Authenticate(p.ids[id], p.authority(true)); err != nil {
						b.Fatal(err)
					}
				}
				up, down, site, server, err = r.measure(xs, ws, drop)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(up)/float64(tc.n), "up-B/site")
			b.ReportMetric(float64(down)/float64(tc.n), "down-B/site")
			b.ReportMetric(float64(4*benchLength), "plain-B/site")
			b.ReportMetric(float64(cfg.Degree), "k")
			b.ReportMetric(float64(site.Microseconds())/1e3/float64(tc.n), "site-cpu-ms")
			b.ReportMetric(float64(server.Microseconds())/1e3, "server-cpu-ms")
		})
	}
}

// threadCPU is the calling thread's CPU time (user + system).
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs a round like run and counts the encoded bytes sent up (to
// the server) and down (to the sites), and the CPU time of the sites'
// work (all sites) and the server's.
func (r *round) measure(xs map[int][]float32, ws map[int]uint64, drop map[int]bool) (up, down int, site, server time.Duration, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	last := threadCPU()
	// lap charges the CPU time since the last lap to *d
	lap := func(d *time.Duration) {
		now := threadCPU()
		*d += now - last
		last = now
	}
	for _, id := range r.cfg.Sites {
		lap(&server)
		a, err := r.clients[id].Advertise()
		if err != nil {
			return 0, 0, 0, 0, err
		}
		up += len(MarshalAdvertise(a))
		lap(&site)
		if err := r.srv.ReceiveAdvertise(a); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	adv, err := r.srv.KeysDone()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	down += len(r.cfg.Sites) * len(MarshalAdvertiseList(adv))
	for _, id := range r.cfg.Sites {
		lap(&server)
		sh, err := r.clients[id].ShareKeys(adv)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		up += len(MarshalShares(sh))
		lap(&site)
		if err := r.srv.ReceiveShares(id, sh); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	if err := r.srv.SharesDone(); err != nil {
		return 0, 0, 0, 0, err
	}
	for _, id := range r.cfg.Sites {
		if drop[id] {
			continue
		}
		in, err := r.srv.Inbox(id)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		down += len(MarshalShares(in))
		lap(&server)
		m, _, err := r.clients[id].MaskInput(in, xs[id], ws[id])
		if err != nil {
			return 0, 0, 0, 0, err
		}
		up += len(MarshalMasked(m))
		lap(&site)
		if err := r.srv.ReceiveMasked(m); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	alive, err := r.srv.MaskedDone()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	for _, id := range alive {
		down += len(MarshalSurvivors(alive))
		lap(&server)
		c, err := r.clients[id].SignSurvivors(alive)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		up += len(MarshalConsistency(c))
		lap(&site)
		if err := r.srv.ReceiveConsistency(c); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	sigs, err := r.srv.ConsistencyDone()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	for _, id := range alive {
		down += len(MarshalConsistencyList(sigs))
		lap(&server)
		rv, err := r.clients[id].Unmask(sigs)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		up += len(MarshalReveal(rv))
		lap(&site)
		if err := r.srv.ReceiveReveal(rv); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	_, err = r.srv.Finish()
	lap(&server)
	return up, down, site, server, err
}
