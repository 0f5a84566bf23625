package config

import "github.com/otpguard/otpguard/internal/guard"

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
}

// fileServiceCredKey is one of a service's credentials.
type fileServiceCredKey struct {
	SID        string `yaml:"sid"`
	SecretFile string `yaml:"secret_file"`
}

func toFileServices(s []guard.Service) []fileService {
	return convertSlice(s, func(s guard.Service) fileService {
		return fileService{SID: s.SID, FriendlyName: s.FriendlyName, AccountSID: s.AccountSID, Default: s.Default,
			Credentials: convertSlice(s.Credentials, func(c guard.ServiceCredential) fileServiceCredKey {
				return fileServiceCredKey{SID: c.SID, SecretFile: c.SecretFile}
			})}
	})
}

func servicesOf(s []fileService) []guard.Service {
	return convertSlice(s, func(s fileService) guard.Service {
		return guard.Service{SID: s.SID, FriendlyName: s.FriendlyName, AccountSID: s.AccountSID, Default: s.Default,
			Credentials: convertSlice(s.Credentials, func(c fileServiceCredKey) guard.ServiceCredential {
				return guard.ServiceCredential{SID: c.SID, SecretFile: c.SecretFile}
			})}
	})
}

// ReadSecretFile reads a service credential's secret_file as otpguard
// reads every configuration file: a regular file of at most 1 MiB, opened
// without blocking.
func ReadSecretFile(path string) ([]byte, error) { return readConfigFile(path) }
