package main

import (
	"math/bits"
	"time"
)

// histogram holds latencies in log-linear buckets: exact below 256 ns,
// then 128 buckets per power of two, so a quantile read at a bucket's
// middle is off by less than 0.4%, in constant memory whatever the run's
// length. Each connection keeps its own; they are merged at the end.
type histogram struct {
	counts []uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const subBuckets = 128

func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < 2*subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - 8 // v>>e is in [128, 256)
	return 2*subBuckets + (e-1)*subBuckets + int(v>>e) - subBuckets
}

// bucketMiddle is the middle of bucket i's range.
func bucketMiddle(i int) time.Duration {
	if i < 2*subBuckets {
		return time.Duration(i)
	}
	e := (i-2*subBuckets)/subBuckets + 1
	m := uint64((i-2*subBuckets)%subBuckets + subBuckets)
	low, high := m<<e, (m+1)<<e-1
	return time.Duration(low + (high-low)/2)
}

func (h *histogram) add(d time.Duration) {
	i := bucketOf(d)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]uint64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile is the latency below which a share p of the requests fall: the
// one of rank floor(p·n)+1, as read off the sorted latencies.
func (h *histogram) quantile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := min(h.n, uint64(p*float64(h.n))+1)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return min(bucketMiddle(i), h.max)
		}
	}
	return h.max
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
