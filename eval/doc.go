// Package eval scores classifiers: the one metrics type of the project
// (named values that survive JSON with NaN and ±Inf), the unweighted mean
// over clients, the harmonic mean of base-to-novel, and the accuracy loop
// that runs a Scorer over evaluation sets of cached prefixes.
package eval
