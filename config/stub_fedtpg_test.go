package config

// fedtpg's stand-in (see methods_test.go), registered after the others.
func init() { RegisterMethod("fedtpg", nil) }
