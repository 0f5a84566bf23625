package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

func TestRedisVersion(t *testing.T) {
	for _, tc := range []struct {
		info    string
		major   int
		wantErr bool
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", 7, false},
		{"# Server\r\nredis_version:6.2.14\r\n", 6, false},
		{"# Server\r\nredis_version:10.1.0\r\n", 10, false},
		{"# Server\r\n", 0, true},
	} {
		_, major, err := store.RedisVersion(tc.info)
		if major != tc.major || (err != nil) != tc.wantErr {
			t.Errorf("RedisVersion(%q) = %d, %v; want %d, error %v", tc.info, major, err, tc.major, tc.wantErr)
		}
	}
}

func TestCheckRedisVersionAcceptsTheRealServer(t *testing.T) {
	tg := redistest.New(t)
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: tg.URL, Timeout: 2e9})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := store.CheckRedisVersion(context.Background(), rdb); err != nil {
		t.Fatalf("CheckRedisVersion on the installed Redis: %v", err)
	}
	if _, err := store.NewRedisClient(store.RedisOptions{URL: "http://nope"}); err == nil || !strings.Contains(err.Error(), "redis url") {
		t.Errorf("bad URL: %v, want a redis url error", err)
	}
}

// TestCheckRedisVersionTellsRefusalFromSilence: a Redis that does not
// answer lets otpguard start (on the fallback); one that answers no (a
// wrong password, a user who may not run INFO) is a configuration error.
func TestCheckRedisVersionTellsRefusalFromSilence(t *testing.T) {
	srv := redistest.Start(t)
	admin := redistest.Client(t, srv.URL())
	if err := admin.Do(context.Background(), "acl", "setuser", "limited", "on", ">limited-pass", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatalf("ACL SETUSER on the test's own server: %v", err)
	}
	check := func(url string) error {
		rdb, err := store.NewRedisClient(store.RedisOptions{URL: url, Timeout: 2e9})
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		return store.CheckRedisVersion(context.Background(), rdb)
	}
	addr := srv.Addr()
	for _, tc := range []struct {
		name, url, want string
		unreachable     bool
	}{
		{"wrong password", "redis://limited:wrong@" + addr + "/0", "credentials", false},
		{"no INFO for this user", "redis://limited:limited-pass@" + addr + "/0", "+info", false},
		{"nobody listening", redistest.RefusedURL(t), "did not answer", true},
	} {
		err := check(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, store.ErrRedisUnreachable) != tc.unreachable {
			t.Errorf("%s: %v; want an error saying %q, unreachable %v", tc.name, err, tc.want, tc.unreachable)
		}
	}
}

// TestRedisClientsHoldTheTimeout: in every mode the client holds each step
// of a call (pool wait, dial, read, write) to the timeout and to the call's
// context deadline, and retries nothing: no command (a retried INCR may
// count twice), no redirect, no second dial. This, with the deadline every
// call carries (TestRedisTimeoutHolds), is what bounds a call by the timeout;
// the benchmarks measure how long it takes.
func TestRedisClientsHoldTheTimeout(t *testing.T) {
	const timeout = 10 * time.Millisecond
	for _, o := range []store.RedisOptions{
		{URL: "redis://127.0.0.1:1/0"},
		{Mode: store.RedisCluster, Addrs: []string{"127.0.0.1:1"}},
		{Mode: store.RedisSentinel, Addrs: []string{"127.0.0.1:1"}, Master: "m"},
	} {
		o.Timeout = timeout
		rdb, err := store.NewUniversalClient(o)
		if err != nil {
			t.Fatalf("%q: %v", o.Mode, err)
		}
		var got redis.Options
		switch c := rdb.(type) {
		case *redis.Client:
			got = *c.Options()
		case *redis.ClusterClient:
			co := c.Options()
			if co.MaxRedirects > 0 {
				t.Errorf("cluster: MaxRedirects %d, want none", co.MaxRedirects)
			}
			got = redis.Options{ContextTimeoutEnabled: co.ContextTimeoutEnabled, DialTimeout: co.DialTimeout, ReadTimeout: co.ReadTimeout,
				WriteTimeout: co.WriteTimeout, PoolTimeout: co.PoolTimeout, MaxRetries: co.MaxRetries, DialerRetries: co.DialerRetries}
		default:
			t.Fatalf("%q: a %T", o.Mode, rdb)
		}
		rdb.Close()
		if !got.ContextTimeoutEnabled || got.DialTimeout != timeout || got.ReadTimeout != timeout || got.WriteTimeout != timeout ||
			got.PoolTimeout != timeout || got.MaxRetries > 0 || got.DialerRetries != 1 {
			t.Errorf("%q: context deadlines %v, timeouts dial %v read %v write %v pool %v, retries %d, dial attempts %d; "+
				"want context deadlines, every timeout %v, no retry, one dial attempt",
				o.Mode, got.ContextTimeoutEnabled, got.DialTimeout, got.ReadTimeout, got.WriteTimeout, got.PoolTimeout,
				got.MaxRetries, got.DialerRetries, timeout)
		}
	}
}
