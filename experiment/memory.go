package experiment

import (
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/protocol"
)

// cacheBudget is the RAM budget of the prefix caches in bytes: cache.memory_mib
// when set, else half of the available memory (4 GiB when unknown).
func cacheBudget(mib int) int64 {
	if mib > 0 {
		return int64(mib) << 20
	}
	if avail := memlimit.AvailableMiB(); avail > 0 {
		return avail << 19 // half, in bytes
	}
	return 4096 << 20
}

// memoryNeed is the estimated peak memory of a run, in bytes, by part.
type memoryNeed struct {
	Model, Cache, Activations int64
}

// Total is the sum of the parts.
func (n memoryNeed) Total() int64 { return n.Model + n.Cache + n.Activations }

// floatsPerActivation is how many float32 values one block keeps per token
// and width unit for the backward pass (LN outputs, Q/K/V, attention output,
// the 4× MLP hidden before and after the activation, their gradients):
// a conservative round figure.
const floatsPerActivation = 20

// estimateMemory estimates what a run of o on task with model architecture
// cfg (params parameters) needs: the weights, the RAM part of the prefix
// caches (records × record size, capped per store by the cache budget;
// beyond it records spill to disk) and the activations of the adapted
// blocks for one training batch (images and the class prompts) and one
// evaluation batch.
func estimateMemory(o Options, cfg clip.Config, params int64, task *protocol.Task, keys []cacheKey, views int, online bool, storeBudget int64) memoryNeed {
	const f32 = 4
	var n memoryNeed
	n.Model = params * f32
	v, tx := cfg.Vision, cfg.Text
	storage := int64(f32)
	if o.CacheBF16 {
		storage = 2
	}
	recBytes := int64(v.Tokens()) * int64(v.Width) * storage // an evaluation batch's prefix
	trainRecs := int64(len(task.UsedTrain())) * int64(max(views, 1))
	if online {
		trainRecs = 0
	}
	testRecs := int64(len(task.UsedTest()))
	distinct := map[cacheKey]bool{}
	for _, k := range keys {
		distinct[k] = true
	}
	for k := range distinct {
		// features, token features, embeddings or a prefix (split: block
		// ℓ's branch input and frozen output)
		rb := int64(prefixcache.RecordFloats(cfg, k.depth, k.split)) * storage
		n.Cache += min(trainRecs*rb, storeBudget) + min(testRecs*rb, storeBudget)
	}
	// A training step sees at most a client's training items; the
	// evaluation buffer is allocated at the configured size.
	maxTrain := 0
	for _, c := range task.Clients {
		maxTrain = max(maxTrain, len(c.Train))
	}
	trainB := int64(min(max(o.Train.Batch, 1), max(maxTrain, 1)))
	evalB := int64(max(o.EvalBatch, 1))
	if o.EvalBatch <= 0 {
		evalB = 32
	}
	minDepth := v.Layers
	for _, k := range keys {
		minDepth = min(minDepth, k.depth)
	}
	blocks := int64(max(v.Layers-minDepth, 1))
	textBlocks := int64(max(tx.Layers-minDepth, 1))
	perImage := int64(v.Tokens()) * int64(v.Width) * blocks * floatsPerActivation * f32
	classes := int64(len(task.Dataset.Classes))
	text := classes * int64(tx.ContextLength) * int64(tx.Width) * textBlocks * floatsPerActivation * f32
	pixels := int64(3*v.ImageSize*v.ImageSize) * f32
	n.Activations = trainB*(perImage+pixels) + text +
		evalB*(recBytes+pixels) + min(evalB, max(testRecs, 1))*perImage/floatsPerActivation*4
	return n
}

// checkMemory refuses a run whose estimate does not fit in the memory the
// machine has available (availMiB ≤ 0: unknown, not checked).
func checkMemory(n memoryNeed, availMiB int64) error {
	if availMiB <= 0 || n.Total() <= availMiB<<20 {
		return nil
	}
	gib := memlimit.GiB
	return fmt.Errorf("this run needs about %.1f GiB (model %.1f, prefix cache %.1f, batch activations %.1f); the machine has %.1f GiB available: "+
		"lower batch_size or eval.batch_size (activations), cache.memory_mib (cache records beyond it spill to disk) or use a smaller model",
		gib(n.Total()), gib(n.Model), gib(n.Cache), gib(n.Activations), gib(availMiB<<20))
}
