//go:build purego

package conformance

// pureGo: this is make test's pure-Go pass (-tags purego, the engine's
// fallback GEMM); see skipPureGo.
const pureGo = true
