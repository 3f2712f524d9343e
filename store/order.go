package store

import (
	"cmp"
	"slices"
)

// EpochOrder returns the items of a feed batch (in change order, as Follow
// hands them on) that carry new messages for a reader of messages: one
// item for each message, its latest state, in epoch order. entry says
// which message an item carries.
//
// Change order is not epoch order: when another process's writes are
// noticed together (two replies, then a reaction to the first), the batch
// holds each message once, at the place of its latest change, so the
// first reply comes after the second. A reader that moves an epoch cursor
// (the v1 view, watch) takes the batch in this order, or it skips a
// message whose epoch is below the cursor it just moved.
//
// When the items are in epoch order already (the usual batch, and every
// batch of one), EpochOrder returns them as they are.
func EpochOrder[T any](items []T, entry func(T) Entry) []T {
	ordered := true
	for i := 1; i < len(items); i++ {
		if entry(items[i]).Epoch <= entry(items[i-1]).Epoch {
			ordered = false
			break
		}
	}
	if ordered {
		return items
	}
	out := slices.Clone(items)
	// Stable: the states of one message stay in change order, and the last
	// of each run of one epoch is that message's latest state.
	slices.SortStableFunc(out, func(a, b T) int { return cmp.Compare(entry(a).Epoch, entry(b).Epoch) })
	n := 0
	for i := range out {
		if i+1 < len(out) && entry(out[i+1]).Epoch == entry(out[i]).Epoch {
			continue
		}
		out[n] = out[i]
		n++
	}
	clear(out[n:])
	return out[:n]
}
