package app

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// The emergency overrides live in the ops database (sqlstore/overrides.go);
// these reach it through the connection that may not be up yet, as the
// deny-list does (database.go).

// AddOverride implements ops.OverrideList.
func (d *database) AddOverride(ctx context.Context, o guard.Override) (guard.Override, error) {
	s, err := d.get()
	if err != nil {
		return guard.Override{}, err
	}
	return s.AddOverride(ctx, o)
}

// RemoveOverride implements ops.OverrideList.
func (d *database) RemoveOverride(ctx context.Context, id int64) (guard.Override, error) {
	s, err := d.get()
	if err != nil {
		return guard.Override{}, err
	}
	return s.RemoveOverride(ctx, id)
}

// ListOverrides implements ops.OverrideList.
func (d *database) ListOverrides(ctx context.Context, now time.Time) ([]guard.Override, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListOverrides(ctx, now)
}
