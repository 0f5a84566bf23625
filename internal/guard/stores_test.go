package guard_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// onRedisAndMiniredis runs test on a store over a real Redis and on one
// over miniredis, the embedded default, each a subtest: a script must
// decide the same on both.
func onRedisAndMiniredis(t *testing.T, test func(t *testing.T, st *store.Redis)) {
	for _, backend := range []string{"redis", "miniredis"} {
		t.Run(backend, func(t *testing.T) {
			var st *store.Redis
			if backend == "redis" {
				st, _, _ = redistest.StoreAt(t, redistest.New(t))
			} else {
				m := miniredis.RunT(t)
				st = store.NewRedis(redistest.Client(t, "redis://"+m.Addr()), redistest.Prefix())
			}
			test(t, st)
		})
	}
}
