package actcache_test

import (
	"fmt"

	"github.com/pfedmma/pfedmma/actcache"
)

// A training loop fills the cache once (Put) with the frozen prefix's output,
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
	for i, k := range keys {
		rec := make([]float32, tokens*width) // stand-in for running blocks 0..ℓ-1
		for j := range rec {
			rec[j] = float32(i*tokens*width + j)
		}
		if _, err := c.Put(k, rec); err != nil {
			fmt.Println(err)
			return
		}
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
