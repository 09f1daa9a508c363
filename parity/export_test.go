package parity

import "github.com/pfedmma/pfedmma/methods"

// TableEntries is the table, for the external tests.
func TableEntries() map[string]Entry { return table }

// Tabled is meth read through Entry e, for the external tests.
func Tabled(meth methods.Method, e Entry) Settings { return tabled{meth, e} }
