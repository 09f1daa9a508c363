package config

// kgcoop's stand-in (see methods_test.go).
func init() { RegisterMethod("kgcoop", nil) }
