package actcache_test

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/actcache"
)

// A training loop fills the cache once with the frozen prefix's output,
// then reads batches of it every epoch.
func Example() {
	const tokens, width = 4, 3 // a real ViT-B/16 prefix is 197 × 768
	c, err := actcache.New(actcache.Options{
		RecordLen:    tokens * width,
		MemoryBudget: 1 << 30, // beyond this, records spill to a mapped file
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	images := []string{"cat.jpg", "dog.jpg", "owl.jpg"}
	var keys []string
	for _, img := range images {
		keys = append(keys, actcache.Key(img, 0)) // view 0: no augmentation
	}
	prefix := func(ctx context.Context, start int, keys []string, out []float32) error {
		for i := range out { // stand-in for running blocks 0..ℓ-1
			out[i] = float32(start*tokens*width + i)
		}
		return nil
	}
	if err := c.Fill(context.Background(), keys, 2, prefix, nil); err != nil {
		fmt.Println(err)
		return
	}

	owl, _ := c.Lookup(actcache.Key("owl.jpg", 0))
	cat, _ := c.Lookup(actcache.Key("cat.jpg", 0))
	batch := make([]float32, 2*tokens*width) // [B, T, D]
	if err := c.GetBatch([]int{owl, cat}, batch); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Len(), batch[0], batch[tokens*width])
	// Output: 3 24 0
}
