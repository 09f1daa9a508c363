// Package conformance is the suite every registered trainable method must
// pass (its tests, table-driven over methods.All(): a method added later is
// checked without editing them). On a tiny world run — the embedded CLIP,
// three clients, a few classes and shots, three rounds with
// federation.fraction < 1 — it checks:
//
//   - Resume: the run interrupted after round 1 and after round 2 — the
//     coordinator (`pfedmma run --resume`), and separately one site
//     restarted from its state folder — ends bit-identical to the
//     uninterrupted run: the global tensors, every site's kept tensors and
//     client state, every round's metrics and the summary.
//   - Network = simulation: the coordinator and the sites over real gRPC
//     with mTLS on loopback (transport.RunCoordinator, transport.RunSite),
//     one site killed mid-run and restarted from its state folder, give
//     the simulation's results bit for bit.
//   - Predict = evaluation: the Predictor rebuilt from each site's saved
//     tensors gives, on every image of the site's evaluation sets, the
//     logits its last evaluation computed, bit for bit.
//   - Privacy: every upload holds exactly the strategy's declared shared
//     tensors; a private tensor's name or value in an upload fails.
//   - Aggregation rules: the configuration's aggregation section (what
//     `run` and `serve` read) with rule median, trimmed_mean, a clipped
//     median (clip_norm) and dp either is refused when the federation is
//     prepared, naming the key and the reason, or gives exactly the
//     received global plus federation/robust's rule of the updates (DP:
//     the clipped mean plus the noise drawn from the seed and round); the
//     section's documented bounds run a round or are refused naming the
//     key (one method: the arithmetic does not depend on it).
//   - Setting edges: every numeric setting at the minimum and the maximum
//     its section's Check documents either runs a round or is refused
//     before any round, naming the setting.
//   - Step contract (every trained method; one without a reference step
//     fixture in testdata/ fails, named): `pfedmma step`'s gradient of
//     every tensor agrees with the reference's relative to that tensor's
//     own scale and with finite differences of the loss it reports along
//     the reference gradient, step1 is SGD applied to that gradient, and
//     the image features come from the images, not from the file; a
//     halved, zeroed or sign-flipped gradient of any one of a method's
//     tensors (above 1e-6 of its largest gradient) fails its gradient
//     check (TestStepContractCatchesBrokenGradients, which logs the
//     per-method table).
//   - Fixture keys: each method's fixture.Settings.FixtureKeys are exactly
//     the metadata keys its step and round read: each listed key changes
//     its settings, step or round; the unlisted ones change nothing
//     (TestFixtureKeys).
//
// A method's settings for the tiny run come from its defaults, with the
// overrides it declares by implementing methods.SmallRun.
//
// make test's pure-Go pass (-tags purego) re-runs the step contract of every
// method and predict = evaluation of pFedMMA and PromptFL (pureGoPredict)
// under the fallback GEMM; the federation-level checks, which do not depend
// on it, and predict = evaluation of every method run in the main pass.
package conformance
