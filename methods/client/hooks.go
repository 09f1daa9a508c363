package client

import "github.com/pfedmma/pfedmma/eval"

// Scorer implements methods.BatchScorer: the client's current parameters
// (fixture.LearnerStep's logits of the batch before the update).
func (c *Client) Scorer() (eval.Scorer, error) { return c.scorer(), nil }

// OnLoss makes f hear the loss of every training batch of the client (a
// fixture round's batch losses); nil stops it.
func (c *Client) OnLoss(f func(loss float64)) { c.onLoss = f }
