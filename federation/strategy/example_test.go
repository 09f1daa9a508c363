package strategy

import (
	"context"
	"fmt"

	. "github.com/pfedmma/pfedmma/federation"
)

// Four toy regression clients share "shared.w" by FedAvg and keep their
// bias private; half of them train in each round after round 0.
func ExampleFedAvg() {
	var clients []Client
	for id := 0; id < 4; id++ {
		clients = append(clients, newToy(id, 0))
	}
	sim := &Coordinator{
		Strategy: &FedAvg{Shared: Names("shared.w")},
		Proxies:  sites(clients, ""),
		Rounds:   3,
		Fraction: 0.5,
		Seed:     1,
		Logger:   quiet,
	}
	hist, err := sim.Run(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range hist.Rounds {
		fmt.Printf("round %d: clients %v, %d bytes up\n", r.Round, r.Selected, r.BytesUp)
	}
	// Output:
	// round 0: clients [0 1 2 3], 48 bytes up
	// round 1: clients [0 3], 24 bytes up
	// round 2: clients [1 3], 24 bytes up
}
