package progress_test

import (
	"os"

	"github.com/pfedmma/pfedmma/progress"
)

// The nested pattern of a federated run: a round bar, a client bar per round
// and a batch bar per client. On a terminal one live line is drawn; in a pipe
// a plain line is printed at most every five seconds.
func Example_nested() {
	const rounds, clients, batches, batchSize = 10, 10, 40, 32
	bar := progress.New(os.Stderr, rounds, "round", "round")
	defer bar.Finish()
	for r := 0; r < rounds; r++ {
		cb := bar.Child(clients, "client", "client")
		for c := 0; c < clients; c++ {
			bb := cb.Child(batches, "batch", "img")
			for i := 0; i < batches; i++ {
				// train one batch
				bb.AddItems(1, batchSize)
			}
			bb.Finish()
			cb.Add(1)
		}
		cb.Finish()
		bar.Add(1)
	}
}
