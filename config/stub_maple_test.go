package config

// maple's stand-in (see methods_test.go).
func init() { RegisterMethod("maple", nil) }
