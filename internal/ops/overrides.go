package ops

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// The audit actions of the emergency overrides (README.md, "Changing
// limits during an attack"); outcomes OutcomeAdded and OutcomeRemoved.
const (
	ActionOverrideAdd    = "ops.override.add"
	ActionOverrideRemove = "ops.override.remove"
)

// maxOverrideReason bounds an override's reason, as maxDenyReason does a
// deny entry's.
const maxOverrideReason = 500

// OverrideList keeps the emergency overrides: the source of truth every
// instance loads from.
type OverrideList interface {
	// AddOverride stores o and returns it with its ID and times as stored.
	AddOverride(ctx context.Context, o guard.Override) (guard.Override, error)
	// RemoveOverride deletes the override id and returns it;
	// guard.ErrNotFound when there is none.
	RemoveOverride(ctx context.Context, id int64) (guard.Override, error)
	// ListOverrides returns the overrides not expired at now, oldest first.
	ListOverrides(ctx context.Context, now time.Time) ([]guard.Override, error)
}

// OverrideCache holds the overrides this instance enforces: loaded from the
// store at every deny-list refresh (DenyCacheOptions.Also), and at once
// after a change made here. Sends never wait on the database: when a load
// fails the last good set stays in force (each override still ends at its
// expiry, by the clock). It implements guard.Overrides.
type OverrideCache struct {
	store OverrideList
	now   func() time.Time
	log   *slog.Logger

	list     atomic.Pointer[[]guard.Override]
	loadedAt atomic.Pointer[time.Time]
	mu       sync.Mutex // serialises loads, as DenyCache's
	failing  bool
}

var _ guard.Overrides = (*OverrideCache)(nil)

// NewOverrideCache returns an empty cache over store; now is the clock
// that says which overrides have expired (time.Now when nil).
func NewOverrideCache(store OverrideList, now func() time.Time, log *slog.Logger) *OverrideCache {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &OverrideCache{store: store, now: now, log: log}
	c.list.Store(&[]guard.Override{})
	c.loadedAt.Store(&time.Time{})
	return c
}

// ActiveOverrides returns the overrides last loaded (guard.Overrides).
func (c *OverrideCache) ActiveOverrides() []guard.Override { return *c.list.Load() }

// LoadedAt is when the set in force was loaded; zero before the first load.
func (c *OverrideCache) LoadedAt() time.Time { return *c.loadedAt.Load() }

// Reload reads the overrides from the store now; on failure the previous
// set stays in force and the error is returned.
func (c *OverrideCache) Reload(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, denyLoadTimeout)
	defer cancel()
	list, err := c.store.ListOverrides(ctx, c.now())
	if err != nil {
		if !c.failing {
			c.failing = true
			c.log.WarnContext(ctx, "overrides reload failed; enforcing the last set loaded", "overrides", len(c.ActiveOverrides()), "err", err)
		}
		return err
	}
	if c.failing {
		c.failing = false
		c.log.InfoContext(ctx, "overrides reload again", "overrides", len(list))
	}
	now := time.Now()
	c.list.Store(&list)
	c.loadedAt.Store(&now)
	return nil
}

// Overrides returns the overrides in force now, from the database (the
// source of truth), oldest first.
func (d *Desk) Overrides(ctx context.Context) ([]guard.Override, error) {
	if d.o.Overrides == nil {
		return nil, dbUnavailable(fmt.Errorf("ops: no override store"))
	}
	list, err := d.o.Overrides.ListOverrides(ctx, d.o.Now())
	if err != nil {
		return nil, dbUnavailable(err)
	}
	return list, nil
}

// FilePolicy is the OTP policy the overrides tighten: the policy file in
// force (after the last reload).
func (d *Desk) FilePolicy() guard.OTPPolicy {
	if d.o.Policy == nil {
		return guard.DefaultPolicies().OTP
	}
	return d.o.Policy()
}

// AddOverride validates o (kind, subject, limit, reason; it must tighten
// the policy file: 422 override_looser otherwise), gives it an expiry of
// `lasts` from now (guard.DefaultOverrideFor when 0, at most
// guard.MaxOverrideFor), stores it authored by actor, enforces it here at
// once and audits it. Errors name the field at fault (guard.OverrideError).
func (d *Desk) AddOverride(ctx context.Context, o guard.Override, lasts time.Duration, actor string) (guard.Override, error) {
	if d.o.Overrides == nil {
		return guard.Override{}, dbUnavailable(fmt.Errorf("ops: no override store"))
	}
	o, err := guard.NormalizeOverride(o)
	if err != nil {
		return guard.Override{}, err
	}
	o.Reason = strings.TrimSpace(o.Reason)
	switch {
	case o.Reason == "":
		return guard.Override{}, fieldErr("reason", "is required: say why, for whoever comes next")
	case utf8.RuneCountInString(o.Reason) > maxOverrideReason || !PlainText(o.Reason):
		return guard.Override{}, fieldErr("reason", "must be text of at most %d characters, without control characters", maxOverrideReason)
	}
	if lasts == 0 {
		lasts = guard.DefaultOverrideFor
	}
	if lasts < time.Second || lasts > guard.MaxOverrideFor {
		return guard.Override{}, fieldErr("expires_in", "must be between 1s and %s, such as 30m or 24h", fmtDuration(guard.MaxOverrideFor))
	}
	if err := guard.CheckTightens(d.FilePolicy(), o); err != nil {
		return guard.Override{}, err
	}
	now := d.o.Now()
	o.ID, o.Author, o.CreatedAt, o.ExpiresAt = 0, actor, now, now.Add(lasts)
	added, err := d.o.Overrides.AddOverride(ctx, o)
	if err != nil {
		return guard.Override{}, dbError(err)
	}
	d.reloadOverrides(ctx)
	d.audit(ctx, guard.Event{Action: ActionOverrideAdd, Outcome: OutcomeAdded, Country: countryOf(added), Actor: actor,
		Detail: overrideDetail(added)})
	return added, nil
}

// RemoveOverride removes the override id (the file's value applies again);
// not_found when there is none.
func (d *Desk) RemoveOverride(ctx context.Context, id int64, actor string) error {
	if d.o.Overrides == nil {
		return dbUnavailable(fmt.Errorf("ops: no override store"))
	}
	removed, err := d.o.Overrides.RemoveOverride(ctx, id)
	if err != nil {
		return dbError(err)
	}
	d.reloadOverrides(ctx)
	d.audit(ctx, guard.Event{Action: ActionOverrideRemove, Outcome: OutcomeRemoved, Country: countryOf(removed), Actor: actor,
		Detail: overrideDetail(removed)})
	return nil
}

func (d *Desk) reloadOverrides(ctx context.Context) {
	if d.o.OverrideCache == nil {
		return
	}
	if err := d.o.OverrideCache.Reload(context.WithoutCancel(ctx)); err != nil {
		d.o.Logger.WarnContext(ctx, "overrides reload after a change failed; the change applies at the next refresh", "err", err)
	}
}

func fieldErr(field, format string, args ...any) error {
	return &guard.OverrideError{Field: field, Err: problem.Errorf(problem.CodeInvalidRequest, "%s: %s", field, fmt.Sprintf(format, args...))}
}

func countryOf(o guard.Override) string {
	switch o.Kind {
	case guard.OverrideCountryLimit, guard.OverrideCountryPause:
		return o.Subject
	case guard.OverrideCarrierLimit, guard.OverrideCarrierPause:
		region, _, _ := strings.Cut(o.Subject, "/")
		return region
	}
	return ""
}

// overrideDetail is the audit detail of an override: what, how tight,
// until when and why. A prefix is shown masked, as numbers are in logs; a
// carrier also as people read it (carrier="NG / MTN").
func overrideDetail(o guard.Override) string {
	s := fmt.Sprintf("id=%d kind=%s", o.ID, o.Kind)
	if o.Subject != "" {
		subject := o.Subject
		if o.Kind == guard.OverridePrefixLimit {
			subject = guard.MaskPhone(subject)
		}
		s += " subject=" + subject
		if o.Kind == guard.OverrideCarrierLimit || o.Kind == guard.OverrideCarrierPause {
			s += ` carrier="` + guard.OverrideSubjectName(o) + `"`
		}
	}
	if o.Kind != guard.OverrideCountryPause && o.Kind != guard.OverrideCarrierPause {
		s += fmt.Sprintf(" limit=%d", o.Limit)
	}
	return s + " expires=" + o.ExpiresAt.UTC().Format(time.RFC3339) + " reason=" + o.Reason
}

// fmtDuration writes whole days as days ("7d"), else as Go does.
func fmtDuration(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}
