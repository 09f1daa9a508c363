package config

// cocoop's stand-in (see methods_test.go).
func init() { RegisterMethod("cocoop", nil) }
