package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// Codes and their verifications (guard/verification.go). Per number, in
// the number's hash slot, one live code per service:
//
//	og:otp:{+E164}:code        the default service's code: hash m (HMAC of the code),
//	                           a (guesses), v (verification id); TTL code_ttl
//	og:otp:{+E164}:code:<SID>  a named service's code (the same fields and o, its SID)
//	og:otp:{+E164}:ver:<id>    hash s (status), c, u, e (created, updated, expires: unix ms),
//	                           a (guesses compared), x (max attempts), r (superseded by),
//	                           o (its service; absent: the default service); TTL 24 h
//
// and per id, in the id's slot, og:ver:{<id>}:p -> the number (TTL 24 h),
// which GET /otp/verifications/{id} reads first to find the number's slot.
//
// Every change of a status is made by one script together with the change
// of the code it describes, on keys of one slot, so that "approved" and
// "the code was consumed" (or "canceled" and "the code was deleted") are
// one atomic step: of a cancel racing a right guess exactly one wins, and
// of two right guesses one. The scripts reach a verification's key from
// the id stored in the code: a key computed in the script rather than
// passed in KEYS, but always in the slot of KEYS[1] (the same {+E164} hash
// tag), which is what Redis Cluster needs of a script.
//
// The scripts that reach a code from a record (read_verification,
// end_verification) compute its service's code key from the default's
// (lua/lib/code.lua), in the same slot.
//
// A record's status says pending until its code ends; "expired" is derived
// when read: pending, but the number's code no longer carries its id (the
// code's TTL ran out, or an ops unblock deleted it).

// saveCodeScript replaces the number's code (KEYS[1]) and creates its record
// (KEYS[2]), and on a single Redis maps the id to the number (KEYS[3])
// (lua/save_code.lua). A hotScript: it is on every send's path.
var saveCodeScript = newHotScript(script("save_code"))

// guessCodeScript counts one guess against a live code (KEYS[1]) and returns
// {attempts, mac, pttl, id}; nil when there is no code (lua/guess_code.lua).
var guessCodeScript = script("guess_code")

// consumeCodeScript deletes the code (KEYS[1]) only if it is still the one
// the caller matched (ARGV[1]) and its record is pending, and approves the
// record (lua/consume_code.lua).
var consumeCodeScript = script("consume_code")

// lockCodeScript marks the record ARGV[1] max_attempts_reached, if it is
// still the number's live code (KEYS[1]) and pending (lua/lock_code.lua).
var lockCodeScript = script("lock_code")

// deleteCodeScript deletes the number's code (KEYS[1]) and the record of its
// verification (lua/delete_code.lua).
var deleteCodeScript = script("delete_code")

// readVerificationScript returns the record KEYS[1] of id ARGV[1] with its
// status derived against its service's code of the number whose default
// code key is KEYS[2] (lua/read_verification.lua).
var readVerificationScript = script("read_verification")

// readCodeScript reads the number's live code (KEYS[1]) and its record
// without counting a guess: {guesses, max, status, pttl}; nil when there
// is no code (lua/read_code.lua).
var readCodeScript = script("read_code")

// endVerificationScript deletes the code of a pending record (KEYS[1], id
// ARGV[1]) of the service ARGV[3], that service's code of the number whose
// default code key is KEYS[2], and marks it canceled or approved
// (lua/end_verification.lua).
var endVerificationScript = script("end_verification")

// Codes keeps the codes and their verification records.
type Codes struct{ keyspace }

var (
	_ guard.Codes         = (*Codes)(nil)
	_ guard.Verifications = (*Codes)(nil)
)

// codeKey is the number's live code of service: the default service's
// keeps the name it had before services, so that an upgrade loses no
// live code; a named service's adds its SID (lua/lib/code.lua's code_key).
func (r *Codes) codeKey(phone, service string) string {
	name := "code"
	if service != guard.DefaultService {
		name += ":" + service
	}
	return r.key(limit.Key{Space: "otp", ID: phone, Name: name})
}

// verPrefix is the start of the number's record keys; the id ends them.
func (r *Codes) verPrefix(phone string) string {
	return r.key(limit.Key{Space: "otp", ID: phone, Name: "ver:"})
}

// verIDKey maps an id to its number.
func (r *Codes) verIDKey(id string) string {
	return r.key(limit.Key{Space: "ver", ID: id, Name: "p"})
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// SaveCode replaces c's service's code of the number with c's and creates its record,
// and maps the id to the number (saveCodeScript): on one server in the
// same script call, one EVALSHA that the Coalescer carries with other
// requests' commands; on Redis Cluster (another slot) after it, on its
// own: when only the mapping fails, the code is saved and the error is
// guard.ErrUnindexed (the record cannot be read by id; the send answers no
// verification_id).
func (r *Codes) SaveCode(ctx context.Context, c guard.NewCode) (int, error) {
	if r.cluster {
		return r.saveCodeBySlot(ctx, c)
	}
	// Built as one EVALSHA (hotScript): no MULTI/EXEC, which the
	// Coalescer does not carry and Redis parses as two more commands.
	prefix := r.verPrefix(c.Phone)
	args := saveCodeScript.args(3, 14)
	args = append(args, r.codeKey(c.Phone, c.Service), prefix+c.VerificationID, r.verIDKey(c.VerificationID),
		c.MAC, c.TTL.Milliseconds(), c.VerificationID, ms(c.Now), c.MaxAttempts,
		c.Retention.Milliseconds(), prefix, ms(c.Now.Add(c.TTL)), c.Service, c.Phone, c.Channel)
	prev, err := saveCodeScript.run(ctx, r.rdb, args).Int64()
	if err != nil {
		return 0, fmt.Errorf("store: save code: %w", err)
	}
	return int(prev), nil
}

// saveCodeBySlot is SaveCode on Redis Cluster: the number's keys first,
// then the id's.
func (r *Codes) saveCodeBySlot(ctx context.Context, c guard.NewCode) (int, error) {
	keys := []string{r.codeKey(c.Phone, c.Service), r.verPrefix(c.Phone) + c.VerificationID}
	args := []any{c.MAC, c.TTL.Milliseconds(), c.VerificationID, ms(c.Now), c.MaxAttempts,
		c.Retention.Milliseconds(), r.verPrefix(c.Phone), ms(c.Now.Add(c.TTL)), c.Service, "", c.Channel}
	// The number's keys first: the id's key lives on another master,
	// whose death must not refuse a send to a number on a live one.
	prev, err := saveCodeScript.Run(ctx, r.rdb, keys, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("store: save code: %w", err)
	}
	if err = setEx(ctx, r.rdb, r.verIDKey(c.VerificationID), c.Phone, c.Retention); err != nil {
		return int(prev), fmt.Errorf("store: index verification id: %w (%w)", guard.ErrUnindexed, err)
	}
	return int(prev), nil
}

// setEx sets key to value with a TTL, by itself.
func setEx(ctx context.Context, rdb rediser, key, value string, ttl time.Duration) error {
	pipe := rdb.TxPipeline()
	set := pipe.Set(ctx, key, value, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	return set.Err()
}

// GuessCode counts a guess of of's service (and verification) and
// returns the stored code (guessCodeScript).
func (r *Codes) GuessCode(ctx context.Context, phone string, of guard.GuessOf, now time.Time) (guard.Guess, error) {
	v, err := guessCodeScript.Run(ctx, r.rdb, []string{r.codeKey(phone, of.Service)}, r.verPrefix(phone), ms(now),
		of.Service, of.VerificationID).Slice()
	if errors.Is(err, redis.Nil) {
		return guard.Guess{}, guard.ErrNotFound
	}
	if err != nil {
		return guard.Guess{}, fmt.Errorf("store: guess code: %w", err)
	}
	if len(v) != 4 {
		return guard.Guess{}, fmt.Errorf("store: guess code: script returned %d values, want 4", len(v))
	}
	attempts, ok1 := v[0].(int64)
	mac, ok2 := v[1].(string)
	pttl, ok3 := v[2].(int64)
	id, ok4 := v[3].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return guard.Guess{}, fmt.Errorf("store: guess code: unexpected reply %T %T %T %T", v[0], v[1], v[2], v[3])
	}
	return guard.Guess{MAC: []byte(mac), Attempts: int(attempts), TTL: time.Duration(max(pttl, 0)) * time.Millisecond,
		VerificationID: id}, nil
}

var _ guard.CodeReader = (*Codes)(nil)

// ReadCode reads the number's live code of service ("" the default
// service) as the ops desk shows it, counting nothing (readCodeScript):
// the guesses counted against it, capped at its maximum, and whether its
// verification is locked; guard.ErrNotFound when it has none.
func (r *Codes) ReadCode(ctx context.Context, phone, service string) (guard.CodeState, error) {
	keys := []string{r.codeKey(phone, service), r.codeKey(phone, guard.DefaultService)}
	v, err := readCodeScript.Run(ctx, r.rdb, keys, r.verPrefix(phone)).Slice()
	if errors.Is(err, redis.Nil) {
		return guard.CodeState{}, guard.ErrNotFound
	}
	if err != nil {
		return guard.CodeState{}, fmt.Errorf("store: read code: %w", err)
	}
	if len(v) != 4 {
		return guard.CodeState{}, fmt.Errorf("store: read code: script returned %d values, want 4", len(v))
	}
	guesses, ok1 := v[0].(int64)
	maxAttempts, ok2 := v[1].(int64)
	status, ok3 := v[2].(string)
	pttl, ok4 := v[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return guard.CodeState{}, fmt.Errorf("store: read code: unexpected reply %T %T %T %T", v[0], v[1], v[2], v[3])
	}
	if maxAttempts > 0 { // guess_code counts the guesses refused past the max too
		guesses = min(guesses, maxAttempts)
	}
	return guard.CodeState{Guesses: guesses, MaxAttempts: maxAttempts, Locked: status == string(guard.StatusMaxAttempts),
		ExpiresIn: time.Duration(max(pttl, 0)) * time.Millisecond}, nil
}

// ConsumeCode deletes service's code of the number if it is still mac
// and approves its record (consumeCodeScript).
func (r *Codes) ConsumeCode(ctx context.Context, phone, service string, mac []byte, now time.Time) (guard.Consumed, error) {
	n, err := consumeCodeScript.Run(ctx, r.rdb, []string{r.codeKey(phone, service)}, mac, r.verPrefix(phone), ms(now)).Int64()
	if err != nil {
		return guard.ConsumedNot, fmt.Errorf("store: consume code: %w", err)
	}
	switch n {
	case 1:
		return guard.ConsumedOK, nil
	case 2:
		return guard.ConsumedLocked, nil
	}
	return guard.ConsumedNot, nil
}

// LockCode marks the record id, of service's live code, max_attempts_reached
// (lockCodeScript).
func (r *Codes) LockCode(ctx context.Context, phone, service, id string, now time.Time) error {
	if err := lockCodeScript.Run(ctx, r.rdb, []string{r.codeKey(phone, service)}, id, r.verPrefix(phone), ms(now)).Err(); err != nil {
		return fmt.Errorf("store: lock code: %w", err)
	}
	return nil
}

// DeleteCode removes service's code of the number and its record
// (deleteCodeScript).
func (r *Codes) DeleteCode(ctx context.Context, phone, service string) error {
	if err := deleteCodeScript.Run(ctx, r.rdb, []string{r.codeKey(phone, service)}, r.verPrefix(phone)).Err(); err != nil {
		return fmt.Errorf("store: delete code: %w", err)
	}
	return nil
}

// Verification returns the record of id: its number from the id's key,
// then the record, its status derived (readVerificationScript).
func (r *Codes) Verification(ctx context.Context, id string) (guard.Verification, error) {
	phone, err := r.verificationPhone(ctx, id)
	if err != nil {
		return guard.Verification{}, err
	}
	v, err := readVerificationScript.Run(ctx, r.rdb, []string{r.verPrefix(phone) + id, r.codeKey(phone, guard.DefaultService)}, id).Slice()
	if errors.Is(err, redis.Nil) {
		return guard.Verification{}, guard.ErrNotFound
	}
	if err != nil {
		return guard.Verification{}, fmt.Errorf("store: read verification: %w", err)
	}
	return parseVerification(id, phone, v)
}

// EndVerification ends the record e.ID of e.Service as e.Status if it is
// pending (endVerificationScript).
func (r *Codes) EndVerification(ctx context.Context, e guard.Ending, now time.Time) (guard.Verification, bool, error) {
	id := e.ID
	phone, err := r.verificationPhone(ctx, id)
	if err != nil {
		return guard.Verification{}, false, err
	}
	v, err := endVerificationScript.Run(ctx, r.rdb, []string{r.verPrefix(phone) + id, r.codeKey(phone, guard.DefaultService)},
		id, ms(now), e.Service, string(e.Status)).Slice()
	if errors.Is(err, redis.Nil) {
		return guard.Verification{}, false, guard.ErrNotFound
	}
	if err != nil {
		return guard.Verification{}, false, fmt.Errorf("store: end verification: %w", err)
	}
	if len(v) < 1 {
		return guard.Verification{}, false, fmt.Errorf("store: end verification: empty reply")
	}
	canceled, ok := v[0].(int64)
	if !ok {
		return guard.Verification{}, false, fmt.Errorf("store: end verification: unexpected reply %T", v[0])
	}
	ver, err := parseVerification(id, phone, v[1:])
	return ver, canceled == 1, err
}

func (r *Codes) verificationPhone(ctx context.Context, id string) (string, error) {
	pipe := r.rdb.TxPipeline()
	get := pipe.Get(ctx, r.verIDKey(id))
	_, err := pipe.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		return "", guard.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store: read verification: %w", err)
	}
	return get.Val(), nil
}

// parseVerification reads {s, c, u, e, a, x, o, h}; o, the service, is
// "" for the default service's, h, the channel, "" for SMS (and in
// records written before channels were kept).
func parseVerification(id, phone string, v []any) (guard.Verification, error) {
	if len(v) != 8 {
		return guard.Verification{}, fmt.Errorf("store: verification: %d fields, want 8", len(v))
	}
	var f [8]string
	for i, x := range v {
		s, ok := x.(string)
		if !ok {
			return guard.Verification{}, fmt.Errorf("store: verification: field %d is %T", i, x)
		}
		f[i] = s
	}
	var n [5]int64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return guard.Verification{}, fmt.Errorf("store: verification: field %d: %w", i+1, err)
		}
	}
	return guard.Verification{ID: id, Phone: phone, Status: guard.VerificationStatus(f[0]),
		CreatedAt: time.UnixMilli(n[0]).UTC(), UpdatedAt: time.UnixMilli(n[1]).UTC(), ExpiresAt: time.UnixMilli(n[2]).UTC(),
		Attempts: int(n[3]), MaxAttempts: int(n[4]), Service: f[6], Channel: cmp.Or(f[7], guard.ChannelSMS)}, nil
}
