//go:build !purego

package conformance

// pureGo: this is the main pass (see skipPureGo).
const pureGo = false
