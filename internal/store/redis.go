// Package store is the shared Redis: the limits' counters and buckets, the
// codes and their verifications, the heartbeat, the block index and the
// attack view's counters, each decided by one MULTI or one Lua script
// (lua/). It implements guard's and ops' interfaces for them, one type per
// concept (Counters, Codes, Velocity, ...), all built over one client by
// NewRedis. The SQL ops database is package sqlstore.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// rediser is what the store needs of a go-redis client: a single node, a
// Cluster or a Sentinel-backed client all satisfy it.
type rediser interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error // hotScript.run
	TxPipeline() redis.Pipeliner
	Pipeline() redis.Pipeliner
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// keyspace is what every type of the store holds: the client, the prefix
// every key starts with, and whether the client is on Redis Cluster (a
// call whose keys span hash slots is then split per slot).
type keyspace struct {
	rdb     rediser
	prefix  string
	cluster bool
}

// Redis is the store over one client: each concept's type, built on the
// same keyspace. Callers are given the type of the concept they use
// (Counters, Codes, ...); the types are embedded so that a caller of
// several, the breaker's adapters in app, reaches each by its methods.
type Redis struct {
	Counters        *Counters
	Codes           *Codes
	Velocity        *Velocity
	TrustMarks      *TrustMarks
	Risks           *Risks
	Blocks          *Blocks
	Conversions     *Conversions
	Deliveries      *Deliveries
	AbuseCounters   *AbuseCounters
	IdempotencyKeys *IdempotencyKeys
	Sessions        *Sessions
}

// NewRedis returns a store over rdb whose keys all start with prefix
// (e.g. "og:"), so that several deployments or tests can share one server.
func NewRedis(rdb rediser, prefix string) *Redis {
	return newRedis(keyspace{rdb: rdb, prefix: prefix})
}

// NewClusterRedis returns a store over a Redis Cluster client: as
// NewRedis, but a batch whose keys span hash slots is sent as one
// MULTI/EXEC per slot, concurrently (slot.go), since neither Redis nor
// go-redis run a transaction across slots.
func NewClusterRedis(rdb rediser, prefix string) *Redis {
	return newRedis(keyspace{rdb: rdb, prefix: prefix, cluster: true})
}

func newRedis(ks keyspace) *Redis {
	codes := &Codes{keyspace: ks}
	velocity := &Velocity{keyspace: ks}
	idem := &IdempotencyKeys{keyspace: ks}
	counters := &Counters{keyspace: ks, limits: &limitHashes{keyspace: ks, shards: DefaultLimitShards}}
	counters.sends = &sends{keyspace: ks, counters: counters, velocity: velocity, idempotency: idem}
	return &Redis{
		Counters:        counters,
		Codes:           codes,
		Velocity:        velocity,
		TrustMarks:      &TrustMarks{keyspace: ks},
		Risks:           &Risks{keyspace: ks},
		Blocks:          &Blocks{keyspace: ks, codes: codes},
		Conversions:     &Conversions{keyspace: ks},
		Deliveries:      &Deliveries{keyspace: ks},
		AbuseCounters:   &AbuseCounters{keyspace: ks},
		IdempotencyKeys: idem,
		Sessions:        &Sessions{keyspace: ks},
	}
}

// LoadScripts loads every script of luaScripts into the server's cache,
// so the first request does not pay for an EVAL.
func (r *Redis) LoadScripts(ctx context.Context) error {
	for _, name := range scriptNames() {
		if err := luaScripts[name].script.Load(ctx, r.Counters.rdb).Err(); err != nil {
			return fmt.Errorf("store: load script %s: %w", name, err)
		}
	}
	return nil
}

// WithLimitShards sets the shards per policy and slice of the limits'
// hashes (n > 0) and returns r. Every instance on one Redis must use the
// same n: another n names other hashes, and the limits start again.
func (r *Redis) WithLimitShards(n int) *Redis {
	if n > 0 {
		r.Counters.limits.shards = uint32(n)
	}
	return r
}

// WithCoalescer tells r that c carries its client's single commands (c
// must be on r's client) and returns r: Counters.TakeAbandons then says
// which calls return as soon as their context ends.
func (r *Redis) WithCoalescer(c *Coalescer) *Redis {
	r.Counters.coalescer = c
	return r
}

// Cluster reports whether r is on Redis Cluster.
func (r *Redis) Cluster() bool { return r.Counters.cluster }

// key renders k as prefix + space + ":{" + id + "}:" + name. The braces are
// a hash tag: every counter of one subject lands in one Cluster slot.
//
// A key without a name is a /limits/check limit, which lives as a field
// of a time-slice hash (limits.go); key renders it prefix + space + "{" +
// id + "}" (og:l:api{user:42}) only for error texts (logKey), with an id
// longer than maxPlainID bytes replaced by its digest (limitID), as in
// the field.
func (s keyspace) key(k limit.Key) string {
	var b strings.Builder
	if k.Name == "" {
		id := limitID(k.ID)
		b.Grow(len(s.prefix) + len(k.Space) + len(id) + 2)
		b.WriteString(s.prefix)
		b.WriteString(k.Space)
		b.WriteByte('{')
		b.WriteString(id)
		b.WriteByte('}')
		return b.String()
	}
	b.Grow(len(s.prefix) + len(k.Space) + len(k.ID) + len(k.Name) + 4)
	b.WriteString(s.prefix)
	b.WriteString(k.Space)
	b.WriteString(":{")
	b.WriteString(k.ID)
	b.WriteString("}:")
	b.WriteString(k.Name)
	return b.String()
}

// logKey is key(k) with its ID masked (guard.MaskPhone), for error texts:
// an ID is often a phone number, and these errors reach the logs.
func (s keyspace) logKey(k limit.Key) string {
	k.ID = guard.MaskPhone(k.ID)
	return s.key(k)
}

// maxPlainID is the longest caller key a limit's Redis key holds as it is.
const maxPlainID = 32

// limitID is id, or for an id longer than maxPlainID bytes "#" and the
// first 96 bits of its SHA-256 in unpadded base64url: 17 bytes whatever
// the key's length (up to limit.MaxKeyLength, 128), so a long caller key
// costs Redis no more than a short one. "#" is not a character a caller
// key may hold (limit.ValidateKey), so no plain key can look like a
// digest. Two long keys share a limit only if their digests collide: by
// chance, about once in 2^48 pairs of distinct keys; on purpose, it takes
// finding a SHA-256 collision on 96 bits for two keys of the caller's own,
// and a second preimage (2^96 work) to hit someone else's.
func limitID(id string) string {
	if len(id) <= maxPlainID {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:12])
}

// interval is the microseconds one token takes to refill.
func interval(ratePerSecond float64) float64 {
	return math.Round(1e6/ratePerSecond*1000) / 1000
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
