package config

import (
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// fileService is one entry of the policy file's services: (guard.Service).
// A credential's secret is never written here: secret_file names the file
// that holds it, read when the policy is put in force (start-up and every
// reload).
type fileService struct {
	SID          string               `yaml:"sid"`
	FriendlyName string               `yaml:"friendly_name"`
	AccountSID   string               `yaml:"account_sid"`
	Default      bool                 `yaml:"default,omitempty"`
	Credentials  []fileServiceCredKey `yaml:"credentials"`
	OTP          *fileServicePolicy   `yaml:"otp,omitempty"`
}

// fileServiceCredKey is one of a service's credentials.
type fileServiceCredKey struct {
	SID        string `yaml:"sid"`
	SecretFile string `yaml:"secret_file"`
}

// fileServicePolicy is a service's otp: block (guard.ServicePolicy): each
// key it gives overrides the deployment's otp: for the service, each it
// leaves out is the deployment's. Cooldown is a pointer so that 0s (none)
// differs from leaving it out.
type fileServicePolicy struct {
	CodeLength        int               `yaml:"code_length,omitempty"`
	CodeTTL           fileDuration      `yaml:"code_ttl,omitempty"`
	MaxVerifyAttempts int               `yaml:"max_verify_attempts,omitempty"`
	Cooldown          *fileDuration     `yaml:"cooldown,omitempty"`
	PerPhone          *fileWindow       `yaml:"per_phone,omitempty"`
	Message           string            `yaml:"message,omitempty"`
	Messages          map[string]string `yaml:"messages,omitempty"`
	Channels          []string          `yaml:"channels,omitempty"`
	Budget            *fileBudget       `yaml:"budget,omitempty"`
}

func toFileServices(s []guard.Service) []fileService {
	return convertSlice(s, func(s guard.Service) fileService {
		return fileService{SID: s.SID, FriendlyName: s.FriendlyName, AccountSID: s.AccountSID, Default: s.Default,
			Credentials: convertSlice(s.Credentials, func(c guard.ServiceCredential) fileServiceCredKey {
				return fileServiceCredKey{SID: c.SID, SecretFile: c.SecretFile}
			}), OTP: toFileServicePolicy(s.OTP)}
	})
}

func servicesOf(s []fileService) []guard.Service {
	return convertSlice(s, func(s fileService) guard.Service {
		return guard.Service{SID: s.SID, FriendlyName: s.FriendlyName, AccountSID: s.AccountSID, Default: s.Default,
			Credentials: convertSlice(s.Credentials, func(c fileServiceCredKey) guard.ServiceCredential {
				return guard.ServiceCredential{SID: c.SID, SecretFile: c.SecretFile}
			}), OTP: s.OTP.policy()}
	})
}

func toFileServicePolicy(p *guard.ServicePolicy) *fileServicePolicy {
	if p == nil {
		return nil
	}
	f := &fileServicePolicy{CodeLength: p.CodeLength, CodeTTL: fileDuration(p.CodeTTL), MaxVerifyAttempts: p.MaxVerifyAttempts,
		Message: p.Message, Messages: convertMap(p.Messages, func(m string) string { return m }),
		Channels: convertSlice(p.Channels, func(c string) string { return c })}
	if p.Cooldown != nil {
		cd := fileDuration(*p.Cooldown)
		f.Cooldown = &cd
	}
	if p.PerPhone != (guard.Window{}) {
		w := toFileWindow(p.PerPhone)
		f.PerPhone = &w
	}
	if p.Budget != (guard.Budget{}) {
		f.Budget = &fileBudget{PerHour: p.Budget.PerHour, PerDay: p.Budget.PerDay}
	}
	return f
}

// policy is the block as the domain's overlay; nil stays nil (none).
func (f *fileServicePolicy) policy() *guard.ServicePolicy {
	if f == nil {
		return nil
	}
	p := &guard.ServicePolicy{CodeLength: f.CodeLength, CodeTTL: time.Duration(f.CodeTTL), MaxVerifyAttempts: f.MaxVerifyAttempts,
		Message: f.Message, Messages: convertMap(f.Messages, func(m string) string { return m }),
		Channels: convertSlice(f.Channels, func(c string) string { return c })}
	if f.Cooldown != nil {
		cd := time.Duration(*f.Cooldown)
		p.Cooldown = &cd
	}
	if f.PerPhone != nil {
		p.PerPhone = f.PerPhone.window()
	}
	if f.Budget != nil {
		p.Budget = guard.Budget{PerHour: f.Budget.PerHour, PerDay: f.Budget.PerDay}
	}
	return p
}

// ReadSecretFile reads a service credential's secret_file as otpguard
// reads every configuration file: a regular file of at most 1 MiB, opened
// without blocking.
func ReadSecretFile(path string) ([]byte, error) { return readConfigFile(path) }
