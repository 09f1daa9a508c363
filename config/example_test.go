package config_test

import (
	"fmt"

	"github.com/pfedmma/pfedmma/config"
)

// A preset, a config file that changes two settings, and a --set override.
func ExampleCompose() {
	file := []byte(`
federation:
  rounds: 10
augment: views:4
`)
	e, err := config.Compose(config.Sources{
		Preset: "paper-cifar",
		File:   "exp.yaml",
		Data:   file,
		Sets:   []string{"optimizer.lr=0.002"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Dataset.Name, e.Federation.Clients, e.Federation.Rounds, e.Optimizer.LR, e.Augment)
	// Output: cifar10 100 10 0.002 views:4
}

// Errors name the file, the line and the field.
func ExampleLoad_errors() {
	_, err := config.Compose(config.Sources{File: "exp.yaml", Data: []byte("federation:\n  fraction: 1.5\n  rouns: 3\n")})
	fmt.Println(err)
	// Output: exp.yaml: line 3: federation.rouns: unknown field; did you mean "rounds"? (known: clients, fraction, rounds, local_epochs, eval_every, compress, secure_aggregation, client_drop_rate)
}

func ExampleExperiment_Set() {
	e := config.Default()
	if err := e.Set("federation.rounds", "3"); err != nil {
		fmt.Println(err)
	}
	fmt.Println(e.Set("federation.rounds", "many"))
	fmt.Println(e.Federation.Rounds)
	// Output:
	// federation.rounds: cannot use "many" as an integer (value from --set federation.rounds=many)
	// 3
}
