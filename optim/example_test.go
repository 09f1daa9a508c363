package optim_test

import (
	"fmt"

	"github.com/pfedmma/pfedmma/optim"
)

// One client's optimizer over two steps: the first step sets the momentum
// buffer to the gradient, the second decays it by the momentum.
func ExampleSGD() {
	w := []float32{1}
	g := []float32{0.5}
	opt := optim.NewSGD(0.9, 0, false)
	sched := optim.Cosine{Base: 0.1, Total: 2}
	for step := 0; step < 2; step++ {
		if err := opt.Step(sched.LR(step), []optim.Param{{Name: "w", Value: w, Grad: g}}); err != nil {
			panic(err)
		}
		fmt.Printf("step %d lr %.3f w %.4f\n", step, sched.LR(step), w[0])
	}
	fmt.Println(opt.State()["momentum_buffer/w"].Data)
	// Output:
	// step 0 lr 0.100 w 0.9500
	// step 1 lr 0.050 w 0.9025
	// [0.95]
}
