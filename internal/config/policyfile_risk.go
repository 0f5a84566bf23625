package config

import (
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// fileRisk is otp.risk (guard.RiskPolicy): the network's risk score.
type fileRisk struct {
	Mode         guard.RiskMode `yaml:"mode"`
	RefuseAbove  int            `yaml:"refuse_above"`
	AllowBelow   int            `yaml:"allow_below"`
	HighFor      fileDuration   `yaml:"high_for"`
	LowFor       fileDuration   `yaml:"low_for"`
	MidFor       fileDuration   `yaml:"mid_for"`
	Countries    []string       `yaml:"countries"`
	VouchedFloor int64          `yaml:"vouched_floor"`
	PerHour      int64          `yaml:"per_hour"`
	PerDay       int64          `yaml:"per_day"`
	Timeout      fileDuration   `yaml:"timeout"`
}

func toFileRisk(r guard.RiskPolicy) fileRisk {
	return fileRisk{Mode: r.Mode, RefuseAbove: r.RefuseAbove, AllowBelow: r.AllowBelow,
		HighFor: fileDuration(r.HighFor), LowFor: fileDuration(r.LowFor), MidFor: fileDuration(r.MidFor),
		Countries: convertSlice(r.Countries, func(c string) string { return c }), VouchedFloor: r.VouchedFloor,
		PerHour: r.PerHour, PerDay: r.PerDay, Timeout: fileDuration(r.Timeout)}
}

// risk is otp.risk as the domain's policy; country codes are read in
// either case.
func (r fileRisk) risk() guard.RiskPolicy {
	return guard.RiskPolicy{Mode: r.Mode, RefuseAbove: r.RefuseAbove, AllowBelow: r.AllowBelow,
		HighFor: time.Duration(r.HighFor), LowFor: time.Duration(r.LowFor), MidFor: time.Duration(r.MidFor),
		Countries: convertSlice(r.Countries, strings.ToUpper), VouchedFloor: r.VouchedFloor,
		PerHour: r.PerHour, PerDay: r.PerDay, Timeout: time.Duration(r.Timeout)}
}
