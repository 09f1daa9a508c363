package world_test

import (
	"fmt"

	"github.com/pfedmma/pfedmma/world"
)

// A world holds out a quarter of its 256 classes from pretraining; a
// base-to-novel dataset puts held-out classes in its novel half.
func Example() {
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(world.NumCompositions, "classes,", len(w.HeldOut()), "held out")

	ds, err := w.Dataset(world.DatasetOptions{NumClasses: 10, TrainPerClass: 4, TestPerClass: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	novelHeld := 0
	for _, c := range w.HeldOut() {
		for _, name := range ds.Classes[5:] {
			if c.Name() == name {
				novelHeld++
			}
		}
	}
	fmt.Println(len(ds.Train), "train images,", novelHeld, "of 5 novel classes held out, domains", ds.Domains)

	img, err := ds.Train[0].Source.Load()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("image", img.Bounds().Dx(), "x", img.Bounds().Dy())
	// Output:
	// 256 classes, 64 held out
	// 160 train images, 5 of 5 novel classes held out, domains [photo clipart sketch painting]
	// image 64 x 64
}
