//go:build purego

package conformance

// kernelChild: the pure-Go build has no kernel families.
func kernelChild() string { return "" }
