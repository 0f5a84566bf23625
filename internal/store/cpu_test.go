package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  int64
}

// commandStats reads INFO commandstats: calls and microseconds of Redis
// CPU per command since the last CONFIG RESETSTAT.
func commandStats(t testing.TB, rdb *redis.Client) map[string]cmdStat {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

// TestRedisCPUPerDecision logs the Redis CPU one /limits/check decision
// costs, from INFO commandstats (the server's own count of microseconds
// spent in each command), for the forms the store sends now and the
// MULTI/EXEC form it sent before, in one run on one private server. It
// asserts nothing about time: the figures are for docs/benchmarks.md
// ("Redis CPU per decision"); compare the ratios, not the absolute µs.
//
//	OTPGUARD_REQUIRE_SERVICES=1 go test -count=1 -run TestRedisCPUPerDecision -v ./internal/store/
func TestRedisCPUPerDecision(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 decisions per form; skipped with -short")
	}
	const n = 20_000
	srv := redistest.Start(t)
	rdb := redistest.Client(t, srv.URL())
	s := store.NewRedis(rdb, "og:")
	ctx := context.Background()
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	id := func(i int) string { return "user:" + strconv.Itoa(100000+i%1000) }
	bucket := func(i int) limit.Take { return ltb(id(i), 1_000_000_000, 1_000_000, 1) }
	window := func(i int) limit.Take { return lfw(id(i), 1_000_000_000, 1) }
	key := func(tk limit.Take) string {
		return "og:" + tk.Key.Space + ":{" + tk.Key.ID + "}:" + tk.Key.Name
	}
	forms := []struct {
		name      string
		decisions int // per call
		call      func(i int) error
	}{
		{"token bucket, MULTI + EVALSHA + EXEC (before)", 1, func(i int) error {
			tk := bucket(i)
			pipe := rdb.TxPipeline()
			store.TokenBucketScriptForTest.EvalSha(ctx, pipe, []string{key(tk)}, tk.Limit, store.Interval(tk.Rate), tk.Cost)
			_, err := pipe.Exec(ctx)
			return err
		}},
		{"token bucket, EVALSHA (now)", 1, func(i int) error {
			_, err := s.Counters.Take(ctx, []limit.Take{bucket(i)})
			return err
		}},
		{"fixed window, MULTI + EVALSHA + EXEC (before)", 1, func(i int) error {
			tk := window(i)
			pipe := rdb.TxPipeline()
			store.WindowTakeScriptForTest.EvalSha(ctx, pipe, []string{key(tk)}, tk.Cost, tk.Limit, tk.Window.Milliseconds())
			_, err := pipe.Exec(ctx)
			return err
		}},
		{"fixed window, EVALSHA (now)", 1, func(i int) error {
			_, err := s.Counters.Take(ctx, []limit.Take{window(i)})
			return err
		}},
		{"batch of 10 (5 + 5), MULTI + 10 EVALSHA + EXEC (before)", 10, func(i int) error {
			pipe := rdb.TxPipeline()
			for j := range 10 {
				if j%2 == 0 {
					tk := bucket(i*10 + j)
					store.TokenBucketScriptForTest.EvalSha(ctx, pipe, []string{key(tk)}, tk.Limit, store.Interval(tk.Rate), tk.Cost)
				} else {
					tk := window(i*10 + j)
					store.WindowTakeScriptForTest.EvalSha(ctx, pipe, []string{key(tk)}, tk.Cost, tk.Limit, tk.Window.Milliseconds())
				}
			}
			_, err := pipe.Exec(ctx)
			return err
		}},
		{"batch of 10 (5 + 5), one EVALSHA (now)", 10, func(i int) error {
			takes := make([]limit.Take, 10)
			for j := range takes {
				if j%2 == 0 {
					takes[j] = bucket(i*10 + j)
				} else {
					takes[j] = window(i*10 + j)
				}
			}
			_, err := s.Counters.Take(ctx, takes)
			return err
		}},
	}
	// Rounds interleave the forms, so that the machine's other load falls
	// on all of them alike.
	const rounds = 4
	type total struct {
		calls, decisions int
		usec             int64   // top-level commands' usec (commandstats)
		cpu              float64 // the server process's CPU seconds (INFO cpu)
		per              map[string]cmdStat
	}
	totals := make([]total, len(forms))
	for i := range totals {
		totals[i].per = map[string]cmdStat{}
	}
	for round := range rounds {
		for fi, f := range forms {
			for i := range 100 { // warm the keys and the connection
				if err := f.call(i); err != nil {
					t.Fatal(err)
				}
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			cpu0 := serverCPU(t, rdb)
			calls := n / rounds / f.decisions
			for i := range calls {
				if err := f.call(round*calls + i); err != nil {
					t.Fatal(err)
				}
			}
			cpu := serverCPU(t, rdb) - cpu0
			st := commandStats(t, rdb)
			tot := &totals[fi]
			tot.calls += calls
			tot.decisions += calls * f.decisions
			tot.cpu += cpu
			// EXEC's time includes the commands it ran, and EVALSHA's the
			// commands its script called: count only the top level.
			if st["exec"].calls > 0 {
				tot.usec += st["multi"].usec + st["exec"].usec
			} else {
				tot.usec += st["evalsha"].usec
			}
			for _, c := range []string{"multi", "evalsha", "exec"} {
				p := tot.per[c]
				p.calls += st[c].calls
				p.usec += st[c].usec
				tot.per[c] = p
			}
		}
	}
	var lines []string
	for fi, f := range forms {
		tot := totals[fi]
		var parts []string
		for _, c := range []string{"multi", "evalsha", "exec"} {
			if p := tot.per[c]; p.calls > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f", c, float64(p.usec)/float64(p.calls)))
			}
		}
		lines = append(lines, fmt.Sprintf("%-58s commands %6.2f µs/decision, process CPU %6.2f µs/decision (µs per call: %s); %d decisions",
			f.name, float64(tot.usec)/float64(tot.decisions), tot.cpu*1e6/float64(tot.decisions), strings.Join(parts, ", "), tot.decisions))
	}
	t.Log("Redis CPU per /limits/check decision: INFO commandstats (top-level usec) and INFO cpu (used_cpu_user + used_cpu_sys):\n" + strings.Join(lines, "\n"))
}

// serverCPU is the Redis process's CPU time so far, user + system, in
// seconds (INFO cpu).
func serverCPU(t testing.TB, rdb *redis.Client) float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("INFO cpu %s=%q: %v", k, v, err)
			}
			sum += f
		}
	}
	return sum
}

// TestRedisCPUPerSave logs the Redis CPU of a code's save on a single
// Redis, from INFO commandstats and INFO cpu as TestRedisCPUPerDecision:
// the MULTI it was (SET of the id's key, EVALSHA of the save, EXEC) and
// the one EVALSHA it is, on a client with a Coalescer as otpguard's, from
// one sender and from 16 at once (where the EVALSHAs share pipelines), in
// interleaved rounds on one private server. It asserts nothing about
// time; compare the ratios.
//
//	OTPGUARD_REQUIRE_SERVICES=1 go test -count=1 -run TestRedisCPUPerSave -v ./internal/store/
func TestRedisCPUPerSave(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 saves per form; skipped with -short")
	}
	const n, rounds = 20_000, 4
	srv := redistest.Start(t)
	rdb := redistest.Client(t, srv.URL())
	_, stop := store.Coalesce(rdb, store.CoalesceOptions{Timeout: 30 * time.Second})
	t.Cleanup(stop)
	s := store.NewRedis(rdb, "og:")
	ctx := context.Background()
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	code := func(i int) guard.NewCode { return newCode("+9198"+strconv.Itoa(10_000_000+i%1000), []byte("mac")) }
	forms := []struct {
		name string
		call func(i int) error
	}{
		{"MULTI + SET + EVALSHA + EXEC (before)", func(i int) error {
			c := code(i)
			ver := "og:otp:{" + c.Phone + "}:ver:"
			pipe := rdb.TxPipeline()
			pipe.Set(ctx, "og:ver:{"+c.VerificationID+"}:p", c.Phone, c.Retention)
			store.SaveCodeScriptForTest.EvalSha(ctx, pipe, []string{"og:otp:{" + c.Phone + "}:code", ver + c.VerificationID},
				c.MAC, c.TTL.Milliseconds(), c.VerificationID, c.Now.UnixMilli(), c.MaxAttempts, c.Retention.Milliseconds(), ver, c.Now.Add(c.TTL).UnixMilli(), c.Service)
			_, err := pipe.Exec(ctx)
			return err
		}},
		{"EVALSHA (now)", func(i int) error {
			_, err := s.Codes.SaveCode(ctx, code(i))
			return err
		}},
	}
	var lines []string
	for _, senders := range []int{1, 16} {
		usec := make([]int64, len(forms))
		cpu := make([]float64, len(forms))
		for range rounds {
			for fi, f := range forms {
				u, c := saveCost(t, rdb, senders, n/rounds, f.call)
				usec[fi] += u
				cpu[fi] += c
			}
		}
		for fi, f := range forms {
			lines = append(lines, fmt.Sprintf("%2d senders, %-38s commands %6.2f µs/save, process CPU %6.2f µs/save",
				senders, f.name, float64(usec[fi])/n, cpu[fi]*1e6/n))
		}
	}
	t.Log("Redis CPU per code save: INFO commandstats (top-level usec) and INFO cpu (used_cpu_user + used_cpu_sys):\n" + strings.Join(lines, "\n"))
}

// saveCost makes calls calls of call from senders goroutines at once and
// returns what Redis spent on them: its commands' top-level usec (EXEC's
// includes the commands it ran, EVALSHA's its script's) and its process's
// CPU seconds.
func saveCost(t *testing.T, rdb *redis.Client, senders, calls int, call func(i int) error) (int64, float64) {
	t.Helper()
	ctx := context.Background()
	for i := range 100 { // warm the keys and the connections
		if err := call(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cpu0 := serverCPU(t, rdb)
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := g; i < calls; i += senders {
				if err := call(i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	cpu := serverCPU(t, rdb) - cpu0
	st := commandStats(t, rdb)
	if st["exec"].calls > 0 {
		return st["multi"].usec + st["exec"].usec, cpu
	}
	return st["evalsha"].usec, cpu
}
