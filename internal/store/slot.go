package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// On Redis Cluster a MULTI/EXEC may only touch keys of one hash slot (the
// server refuses CROSSSLOT, and go-redis's ClusterClient refuses a cross-slot
// TxPipeline before sending it). A batch whose keys span slots is therefore
// split: one MULTI/EXEC per slot, all sent at once, each to the master of
// its slot, and the answers put back in the batch's order. Each part is
// still atomic; the batch as a whole is kept all-or-nothing by the caller,
// which refunds the parts of a denied batch (limit.Limiter).

// slotCount is the number of hash slots of Redis Cluster.
const slotCount = 16384

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag (the part between the first "{" and the next "}", when not empty),
// or of the whole key, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % slotCount)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum of
// the Redis Cluster specification.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// bySlot runs run once per hash slot of items (concurrently when there are
// several) and returns the results in the order of items. key names the
// Redis key of an item. The first error wins; parts that did run on other
// slots stay counted (as a timed-out MULTI may have counted: the caller
// treats the whole batch as unknown and takes its fallback).
func bySlot[T, R any](ctx context.Context, items []T, key func(T) string, run func(context.Context, []T) ([]R, error)) ([]R, error) {
	var order []int           // slots in order of first appearance
	groups := map[int][]int{} // slot -> indexes into items
	for i, it := range items {
		s := Slot(key(it))
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	if len(order) <= 1 {
		return run(ctx, items)
	}
	out := make([]R, len(items))
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for g, s := range order {
		idx := groups[s]
		part := make([]T, len(idx))
		for j, i := range idx {
			part[j] = items[i]
		}
		wg.Go(func() {
			res, err := run(ctx, part)
			if err == nil && len(res) != len(part) {
				err = fmt.Errorf("store: %d results for %d items of slot %d", len(res), len(part), s)
			}
			if err != nil {
				errs[g] = err
				return
			}
			for j, i := range idx {
				out[i] = res[j]
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
